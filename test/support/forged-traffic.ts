import { vtepMac } from '../../lib/vtep-mac';
import { ipLine, netnsExec } from './netns-fixture';

// Packets with a source their sender does not own, for the tests of the fabric's source filters: a
// probe table inside the target pod counts what arrived from each forged source, and a burst of echo
// requests is sent under a forged source from a rogue namespace. No reply ever comes back to the rogue.

/** In `podNs`, a probe table whose named counters count the packets from each source (name → source). */
export async function countSources(podNs: string, counters: Record<string, string>): Promise<void> {
  const each = Object.entries(counters).map(
    ([name, source]) =>
      `add counter inet probe ${name}; add rule inet probe c ip saddr ${source} counter name ${name}`,
  );
  await netnsExec(
    podNs,
    'nft',
    'add table inet probe; add chain inet probe c { type filter hook input priority 0; policy accept; }; ' +
      each.join('; '),
  );
}

/** The packets an nftables counter counted (a probe counter, or one of the fabric's own). */
export async function counted(ns: string, counter: string, table = 'probe'): Promise<number> {
  const out = await netnsExec(ns, 'nft', 'list', 'counter', 'inet', table, counter);
  return Number(/packets (\d+)/.exec(out)?.[1] ?? NaN);
}

export interface Forgery {
  /** The rogue namespace that sends. */
  from: string;
  /** The forged source address (held by the rogue). */
  source: string;
  /** The pod's namespace, where a probe counter named `counter` counts `source`. */
  podNs: string;
  podIp: string;
  counter: string;
  count: number;
}

/** Sends `count` echo requests under the forged source; how many reached the pod. */
export async function forge(f: Forgery): Promise<number> {
  const before = await counted(f.podNs, f.counter);
  const ping = `ping -q -c ${f.count} -i 0.02 -W 1 -I ${f.source} ${f.podIp}`;
  // No reply comes back to the rogue: ping exits 1.
  await netnsExec(f.from, ...ping.split(' ')).catch(() => undefined);
  // The last requests are in flight for a moment after ping gives up on them.
  await new Promise((r) => setTimeout(r, 200));
  return (await counted(f.podNs, f.counter)) - before;
}

export interface RogueVtep {
  /** The rogue's namespace and the underlay address its device sends from. */
  ns: string;
  local: string;
  /** The node whose VTEP it aims at, and that node's pod it sends to. */
  remote: string;
  podIp: string;
  /** The inner sources it holds. */
  sources: string[];
}

/**
 * A hand-made VXLAN device `rg` that speaks our VNI and port straight at a node, with the node's VTEP
 * MAC as the inner destination, so that the node's device hands the inner packet to its stack.
 */
export async function addRogueVtep(r: RogueVtep): Promise<void> {
  const x = (line: string): Promise<string> => ipLine(r.ns, line);
  await x(`link add rg type vxlan id 30574 dstport 4789 local ${r.local} remote ${r.remote} dev eth0`);
  await x('link set rg up');
  for (const s of r.sources) await x(`addr add ${s}/32 dev rg`);
  await x(`neigh add ${r.podIp} lladdr ${vtepMac(r.remote)} dev rg nud permanent`);
  await x(`route add ${r.podIp}/32 dev rg`);
}
