// How one target is reached: the choice between a direct route (via its underlay address, out of the
// uplink) and the tunnel (tunnel-target.ts). Routed mode routes only peers on a subnet of the uplink;
// hybrid routes those directly and tunnels the rest; vxlan tunnels all. An underlay address that is
// ours or another target's is refused before either. Its own file because this is the one place the
// modes differ in what they program for a peer.

import { AF_INET, AF_INET6 } from '../../../../lib/rtnetlink';
import { onLink } from '../underlay';
import { familyOfPrefix, refuse, type Target, type TargetOutcome } from './peer-targets';
import { targetMtu } from './route-mtu';
import { tunnel } from './tunnel-target';
import { peerRoute, type Planning } from './wanted';

/** Programs the routes (and VXLAN entries) to one target; says how it is reached or why not. */
export function reach(p: Planning, t: Target): TargetOutcome {
  const { ctx, claims } = p;
  const underlay = t.underlay;
  if (underlay === undefined)
    return {
      path: 'unreachable',
      reason: `no underlay address of IPv${ctx.underlay.family === AF_INET ? 4 : 6}, the family of this node's (${ctx.underlay.address})`,
    };
  const squatted =
    underlay === ctx.underlay.address ? 'this node' : claims.holder('underlay', underlay, t.label);
  if (squatted !== undefined) return refuse('underlay', underlay, squatted);
  const direct = onLink(ctx.underlay, underlay);
  if (ctx.mode === 'routed' || (ctx.mode === 'hybrid' && direct)) {
    if (!direct)
      return {
        path: 'unreachable',
        reason:
          `underlay ${underlay} is not on a subnet of uplink ${ctx.underlay.uplink.name} (${ctx.underlay.subnets.map((x) => x.text).join(', ') || 'none'}); ` +
          `routed mode routes only directly connected peers, never via a gateway (use hybrid or vxlan)`,
      };
    return routeDirect(p, { ...t, underlay });
  }
  return tunnel(p, { ...t, underlay });
}

/**
 * Routes a target on the uplink's subnet straight to its underlay address. A direct next hop must be
 * of the prefix's family: the other family's prefixes (IPv6 pods over an IPv4 underlay) cross the
 * tunnel in hybrid mode, so that every pod reaches every pod, and are said to be unrouted in routed.
 */
function routeDirect(p: Planning, t: Target & { underlay: string }): TargetOutcome {
  const { ctx, claims, plan } = p;
  const family = ctx.underlay.family;
  const skipped: string[] = [];
  for (const prefix of t.prefixes) {
    const f = familyOfPrefix(prefix);
    if (f !== family) {
      skipped.push(prefix);
      continue;
    }
    claims.take('prefix', prefix, t.node);
    claims.take('underlay', t.underlay, t.label);
    const via = { gateway: t.underlay, oif: ctx.underlay.uplink.index, onlink: false };
    plan.routes.push(peerRoute(f, prefix, via, targetMtu(ctx, t), t.node));
  }
  if (skipped.length === 0) return { path: 'direct' };
  const other = family === AF_INET ? AF_INET6 : AF_INET;
  const tunnelled =
    ctx.mode === 'hybrid'
      ? tunnel(p, { ...t, prefixes: skipped, gateways: { [other]: t.gateways[other] } })
      : undefined;
  if (tunnelled && tunnelled.path !== 'unreachable') return { path: 'direct' };
  return {
    path: 'direct',
    ...(tunnelled?.refused ? { refused: tunnelled.refused } : {}),
    reason:
      `not routed directly (another family than the underlay): ${skipped.join(', ')}` +
      (tunnelled?.reason ? `; not over VXLAN either: ${tunnelled.reason}` : ''),
  };
}
