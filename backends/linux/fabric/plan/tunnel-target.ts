// A target reached through our VXLAN device (vxlan mode, or hybrid across a router, or a family the
// underlay cannot route directly): one FDB entry (its VTEP MAC → its underlay address), per family one
// permanent neighbour (its gateway key → that MAC) and one route per prefix `via` the key, onlink.
// Its own file because these are the entries the tunnel alone needs, and each refusal of them (a
// VTEP that does not match ours, a MAC another holds, no free key) is decided here.

import { AF_INET, AF_INET6 } from '../../../../lib/rtnetlink';
import { refusalReason } from '../identity-claims';
import { familyOfPrefix, refuse, type Target, type TargetOutcome } from './peer-targets';
import { targetMtu } from './route-mtu';
import { peerRoute, type Planning } from './wanted';

/** Routes a target's prefixes through our VXLAN device; says how it is reached or why not. */
export function tunnel({ ctx, claims, plan }: Planning, t: Target & { underlay: string }): TargetOutcome {
  if (ctx.vxlanIndex === undefined) return { path: 'unreachable', reason: 'no VXLAN device' };
  const vtep = t.vtep;
  if (!vtep) return { path: 'unreachable', reason: 'the peer publishes no VTEP (it runs no VXLAN device)' };
  if (vtep.vni !== ctx.vni || vtep.port !== ctx.port)
    return {
      path: 'unreachable',
      reason: `VTEP VNI ${vtep.vni} port ${vtep.port} differs from ours (VNI ${ctx.vni} port ${ctx.port})`,
    };
  const mac = vtep.mac.toLowerCase();
  const macHolder = mac === ctx.ownMac ? 'this node' : claims.holder('mac', mac, t.label);
  if (macHolder !== undefined) return refuse('mac', mac, macHolder);
  if (t.prefixes.length === 0) return { path: 'vxlan' };
  const noKey = unkeyed(t);
  if (noKey?.all) return { path: 'unreachable', reason: noKey.reason, ...noKey.refused };
  claims.take('mac', mac, t.label);
  claims.take('underlay', t.underlay, t.label);
  plan.fdb.push({ mac, dst: t.underlay, peer: t.label });
  for (const f of [AF_INET, AF_INET6] as const) {
    const gateway = t.gateways[f];
    if (gateway === undefined) continue;
    claims.programmed('gateway', gateway, t.label);
    plan.neighbours.push({ family: f, dst: gateway, mac, peer: t.label });
    for (const prefix of t.prefixes) {
      if (familyOfPrefix(prefix) !== f) continue;
      claims.take('prefix', prefix, t.node);
      plan.routes.push(
        peerRoute(f, prefix, { gateway, oif: ctx.vxlanIndex, onlink: true }, targetMtu(ctx, t), t.node),
      );
    }
  }
  return noKey ? { path: 'vxlan', reason: noKey.reason, ...noKey.refused } : { path: 'vxlan' };
}

/**
 * The target's prefixes of a family without a free gateway key: they have no neighbour to route
 * through, which is said, never silent. `all` when that is every prefix of the target.
 */
function unkeyed(
  t: Target,
): { all: boolean; reason: string; refused: Pick<TargetOutcome, 'refused'> } | undefined {
  const left = t.prefixes.filter((p) => t.gateways[familyOfPrefix(p)] === undefined);
  if (left.length === 0) return undefined;
  const blocked = t.blocked ?? [];
  return {
    all: left.length === t.prefixes.length,
    reason: `not routed, no gateway key free: ${left.join(', ')}${blocked.map((b) => `; ${refusalReason(b)}`).join('')}`,
    refused: blocked.length > 0 ? { refused: blocked } : {},
  };
}
