// The MTU the host fabric's routes and device carry: this node's pod MTU, from its uplink, and per
// target the smaller of that and what the pods behind the target carry. A packet that fits our pods
// but not theirs would be dropped past the tunnel. The arithmetic (which modes encapsulate, and by how
// many bytes) is core/fabric/pod-mtu.ts's; this file only reads it for the host's underlay and targets.

import type { FabricMode } from '../../../../core/fabric-dataplane';
import { encapsulationOverheadOn, podMtu } from '../../../../core/fabric/pod-mtu';
import { AF_INET6 } from '../../../../lib/rtnetlink';
import type { Underlay } from '../underlay';
import type { PlanContext } from './wanted';

/** The pod MTU for a mode: the uplink's less what the encapsulation adds on the paths the mode uses. */
export function underlayPodMtu(mode: Exclude<FabricMode, 'off'>, underlay: Underlay): number {
  return underlay.uplink.mtu - encapsulationOverheadOn(mode, underlay.family === AF_INET6 ? 6 : 4);
}

/** The MTU of the routes to a target: ours, or what its pods carry when that is less. */
export function targetMtu(
  ctx: Pick<PlanContext, 'mode' | 'routeMtu'>,
  target: { dpu: boolean; mtu: number; underlay: string },
): number {
  // A DPU encapsulates its pods' packets whatever the mode.
  const mode = target.dpu ? 'vxlan' : ctx.mode;
  return Math.min(ctx.routeMtu, podMtu(mode, { mtu: target.mtu, underlay: [target.underlay] }));
}
