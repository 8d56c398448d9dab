import { execFileSync } from 'node:child_process';

// The host port as the node's own namespace sees it: the daemon attaches that namespace to the network
// on its DPU as wn-host0, under a workload id of its own, and the host reaches the pods through it.

/** The workload id the daemon attaches the host port under. */
export const HOST_PORT = 'workloadnet-host-port';

/** wn-host0 in a namespace: its ifindex and first address; undefined while there is none. */
export function hostLink(ns: string): { ifindex: number; address: string } | undefined {
  try {
    const out = execFileSync('ip', ['-n', ns, '-j', 'addr', 'show', 'dev', 'wn-host0'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const link = (JSON.parse(out) as Array<{ ifindex: number; addr_info: Array<{ local: string }> }>)[0];
    return link ? { ifindex: link.ifindex, address: link.addr_info[0]?.local ?? '' } : undefined;
  } catch {
    return undefined;
  }
}

/** `ip -n ns route get ip`: the device a namespace's route to an address goes out of. */
export function routeDevice(ns: string, ip: string): string {
  const out = execFileSync('ip', ['-n', ns, '-j', 'route', 'get', ip], { encoding: 'utf8' });
  return (JSON.parse(out) as Array<{ dev?: string }>)[0]?.dev ?? '';
}
