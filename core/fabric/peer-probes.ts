import type { Metrics } from '../metrics';
import type { FabricDataplane, PeerProbe } from '../fabric-dataplane';
import type { FabricPeerStatus } from '../fabric-status';

// The data-path probes as the core sees them: the dataplanes' word per peer merged (put on the peer
// rows of Status by peer-rows.ts), and counted in the gauges. A degraded peer is shown, never withdrawn for: only its
// source's word removes it (with the grace, which failing probes cut short, withdrawal-grace.ts).

/**
 * Probes in a row a peer may leave unanswered, never having answered one, before it counts as one
 * that never proved itself (withdrawal-grace.ts): it is then withdrawn at once when it leaves.
 */
export const UNANSWERED_TO_DISPROVE = 3;

/** Whether the probes say the peer never answered, having been asked enough times. */
export function neverAnswered(p: PeerProbe | undefined): boolean {
  return p !== undefined && !p.answered && p.lost >= UNANSWERED_TO_DISPROVE;
}

/**
 * The dataplanes' probes by peer, merged: a peer any dataplane finds reachable is reachable (with its
 * round trip); degraded only when none reaches it.
 */
export function mergedProbes(dataplanes: readonly FabricDataplane[]): Map<string, PeerProbe> {
  const out = new Map<string, PeerProbe>();
  for (const dp of dataplanes)
    for (const [node, p] of dp.probes?.() ?? []) {
      const had = out.get(node);
      if (!had || rank(p) > rank(had)) out.set(node, p);
    }
  return out;
}

/** Peers degraded, and the spread of the peers' median round trips (0.5, 0.9 and the slowest). */
export function setProbeGauges(
  m: Metrics,
  peers: readonly FabricPeerStatus[],
  probes: ReadonlyMap<string, PeerProbe>,
): void {
  let degraded = 0;
  const rtts: number[] = [];
  if (probes.size > 0)
    for (const p of peers) {
      const probe = probes.get(p.node);
      if (probe?.state === 'degraded') degraded++;
      if (probe?.medianRttMs !== undefined) rtts.push(probe.medianRttMs / 1000);
    }
  m.fabricPeersDegraded.set(degraded);
  m.fabricProbeRtt.reset();
  rtts.sort((a, b) => a - b);
  if (rtts.length === 0) return;
  for (const [quantile, q] of [
    ['0.5', 0.5],
    ['0.9', 0.9],
    ['1', 1],
  ] as const)
    m.fabricProbeRtt.set({ quantile }, rtts[Math.min(rtts.length - 1, Math.floor(q * rtts.length))] ?? 0);
}

/** How good a probe's word is: reachable over unknown over degraded. */
function rank(p: PeerProbe): number {
  return p.state === 'reachable' ? 2 : p.state === 'unknown' ? 1 : 0;
}
