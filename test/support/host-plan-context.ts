import { underlayPodMtu } from '../../backends/linux/fabric/plan/route-mtu';
import type { PlanContext } from '../../backends/linux/fabric/plan/wanted';
import type { Underlay } from '../../backends/linux/fabric/underlay';
import { parseCidr } from '../../lib/cidr';
import { AF_INET } from '../../lib/rtnetlink';

// What the host fabric's planner is given on a node at 10.0.1.1 (uplink eth0, MTU 1500, VTEP device
// index 9 where the mode has one), for the plan tests that need no kernel.

export const UNDERLAY: Underlay = {
  address: '10.0.1.1',
  family: AF_INET,
  uplink: { index: 2, name: 'eth0', flags: 0, up: true, mtu: 1500, group: 0 },
  subnets: [parseCidr('10.0.1.0/24')],
};

/** The context of one plan in `mode`; `over` replaces any part (the route MTU follows its underlay). */
export function planContext(mode: PlanContext['mode'], over: Partial<PlanContext> = {}): PlanContext {
  const underlay = over.underlay ?? UNDERLAY;
  return {
    mode,
    underlay,
    vxlanIndex: mode === 'routed' || mode === 'external' ? undefined : 9,
    vni: 30574,
    port: 4789,
    ownMac: '0e:77:0a:00:01:01',
    routeMtu: underlayPodMtu(mode, underlay),
    clusterCidrs: ['10.244.0.0/16'],
    ...over,
  };
}
