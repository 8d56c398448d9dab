// One peer planned whole: its own VTEP reached for what of its prefixes no endpoint covers, each of its
// endpoints (DPUs) reached for its slices, and what Status says of it: one path for the peer (vxlan if
// any target is tunnelled, else direct if any is routed) and, in words, every part that is not
// reached, every claim refused and every input ignored. Its own file because this is where a peer's
// targets meet and its outcome is told; how each target is reached is reach-target.ts's.

import type { PeerPath, RefusedClaim } from '../../../../core/fabric-dataplane';
import type { Peer } from '../../../../core/peer-source';
import { byAddress } from '../prefix-remainder';
import { pickGateways } from './gateway-keys';
import {
  canonicalPrefixes,
  peerTargets,
  type EndpointTarget,
  type PeerTargets,
  type TargetOutcome,
} from './peer-targets';
import { reach } from './reach-target';
import type { Planning } from './wanted';

/** Programs what reaches `peer` into the plan; says how it is reached, or why not. */
export function planPeer(p: Planning, peer: Peer): PeerPath {
  if (p.ctx.mode === 'external') {
    const { ok, bad } = canonicalPrefixes(peer);
    return peerPath({ node: peer.node, path: 'external', prefixes: ok }, bad, [], []);
  }
  const t = peerTargets(peer, p.ctx.underlay.family, p.claims);
  const refused: RefusedClaim[] = [...t.taken];
  const ignoredTunnel: string[] = [];
  const outcomes: string[] = [];
  const paths: Array<TargetOutcome['path']> = [];
  const host = reachOwnVtep(p, peer, t, ignoredTunnel);
  if (host) {
    refused.push(...(host.refused ?? []));
    paths.push(host.path);
    if (t.endpoints.length > 0 && host.path === 'unreachable')
      outcomes.push(
        `unreachable, covered by no endpoint: ${t.rest.flatMap((r) => r.left.map((c) => c.text)).join(', ')} (${host.reason ?? ''})`,
      );
    else if (host.reason !== undefined) outcomes.push(host.reason);
  }
  for (const e of t.endpoints) {
    if (e.prefixes.length === 0) continue;
    const o = reachEndpoint(p, peer.node, e);
    refused.push(...(o.refused ?? []));
    paths.push(o.path);
    const prefixes = e.prefixes.map((c) => c.text).join(', ');
    if (o.path === 'unreachable')
      outcomes.push(`endpoint ${e.id} (${prefixes}) unreachable: ${o.reason ?? ''}`);
    else if (o.reason !== undefined) outcomes.push(`endpoint ${e.id}: ${o.reason}`);
  }
  if (t.notOwn.length > 0)
    outcomes.push(`endpoint prefixes outside the peer's own prefixes, not routed: ${t.notOwn.join(', ')}`);
  const clash =
    t.taken.length > 0
      ? `prefixes also announced by ${t.taken.map((r) => `${r.holder} (${r.value})`).join(', ')}, which keeps them`
      : undefined;
  const path = paths.includes('vxlan') ? 'vxlan' : paths.includes('direct') ? 'direct' : 'unreachable';
  return peerPath({ node: peer.node, path, prefixes: t.prefixes }, t.bad, refused, [
    clash,
    ...outcomes,
    tunnelNote(ignoredTunnel),
  ]);
}

/** What of the peer's prefixes no endpoint covers, to its own VTEP; none when its endpoints cover all. */
function reachOwnVtep(p: Planning, peer: Peer, t: PeerTargets, ignored: string[]): TargetOutcome | undefined {
  if (t.endpoints.length > 0 && t.rest.length === 0) return undefined;
  return reach(p, {
    label: peer.node,
    node: peer.node,
    underlay: t.underlay,
    vtep: peer.vtep,
    mtu: peer.mtu,
    dpu: false,
    prefixes: t.rest.map((r) => r.prefix.text),
    ...pickGateways(p.claims, peer.node, t.rest.flatMap((r) => r.left.slice(0, 1)).sort(byAddress), {
      gateways: peer.vtep?.gateways,
      within: t.rest.flatMap((r) => r.left),
      ignored,
    }),
  });
}

/** One endpoint (DPU) of the peer, for its slices and borrowed /32. */
function reachEndpoint(p: Planning, node: string, e: EndpointTarget): TargetOutcome {
  // Slices first: a slice's first address is never a pod's, a borrowed /32 is.
  const byLength = [...e.prefixes].sort((a, b) => a.prefixLength - b.prefixLength);
  const label = `${node}/${e.id}`;
  return reach(p, {
    label,
    node,
    underlay: e.underlay,
    vtep: e.vtep,
    mtu: e.mtu,
    dpu: true,
    prefixes: e.prefixes.map((c) => c.text),
    ...pickGateways(p.claims, label, byLength),
  });
}

/** The peer's path with its reasons (those given, then the prefixes ignored) and refused claims. */
function peerPath(
  out: PeerPath,
  bad: readonly string[],
  refused: RefusedClaim[],
  reasons: ReadonlyArray<string | undefined>,
): PeerPath {
  const told = reasons.filter((r) => r !== undefined).join('; ');
  const text = [told, bad.length > 0 ? `ignored prefixes that are not CIDRs: ${bad.join(', ')}` : undefined]
    .filter((r) => r !== undefined && r !== '')
    .join('; ');
  if (text !== '') out.reason = text;
  if (refused.length > 0) out.refused = refused;
  return out;
}

/** Why a peer is keyed on its first address although it publishes a tunnel address. */
function tunnelNote(ignored: readonly string[]): string | undefined {
  return ignored.length === 0
    ? undefined
    : `published tunnel address ${ignored.join(', ')} ignored: not inside its own prefixes (or another peer's key); keyed on its first address`;
}
