import type { FabricStatus } from '../proto/gen/workloadnet/v1/workload';

// How many peers there are and how many of them this node reaches, in words: "3 peers: 2 reachable,
// 1 unreachable". A peer is unreachable when no path reaches it (path "unreachable"), degraded when
// its path is programmed but the data-path probes stopped answering, reachable otherwise.

export function peerCounts(f: FabricStatus): string {
  // A daemon from before peer_count gives the rows only; a Status asked without rows gives the count.
  const total = Math.max(f.peerCount, f.peers.length);
  const noun = `${total} ${total === 1 ? 'peer' : 'peers'}`;
  if (f.peers.length === 0) return noun;
  let unreachable = 0;
  let degraded = 0;
  for (const p of f.peers) {
    if (p.path === 'unreachable') unreachable++;
    else if (p.probe?.state === 'degraded') degraded++;
  }
  const parts = [`${f.peers.length - unreachable - degraded} reachable`];
  if (unreachable > 0) parts.push(`${unreachable} unreachable`);
  if (degraded > 0) parts.push(`${degraded} degraded`);
  return `${noun}: ${parts.join(', ')}`;
}
