import { expect } from 'chai';
import type { Peer } from '../../../core/peer-source';
import { planHostFabric } from '../../../backends/linux/fabric/plan/host-plan';
import type { PlanContext } from '../../../backends/linux/fabric/plan/wanted';
import type { Underlay } from '../../../backends/linux/fabric/underlay';
import { parseCidr } from '../../../lib/cidr';
import { AF_INET6, RTN_UNREACHABLE } from '../../../lib/rtnetlink';
import { UNDERLAY, planContext } from '../../support/host-plan-context';

// A route to a peer's prefix carries no more than the pods behind the peer carry: the uplink MTU the
// peer publishes less what the mode's encapsulation adds (a DPU's pods: always less VXLAN's), and never
// more than our own pods' MTU.

/** No VTEP MAC of our own: none of these peers is refused for stating it. */
const ctx = (mode: PlanContext['mode'], over: Partial<PlanContext> = {}): PlanContext =>
  planContext(mode, { ownMac: undefined, ...over });

function peer(
  node: string,
  address: string,
  prefixes: string[],
  mtu: number,
  over: Partial<Peer> = {},
): Peer {
  const mac = `0e:77:${address
    .split('.')
    .map((x) => Number(x).toString(16).padStart(2, '0'))
    .join(':')}`;
  return {
    node,
    underlay: [address],
    mtu,
    vtep: { mac, vni: 30574, port: 4789 },
    bootId: '',
    prefixes,
    ...over,
  };
}

/** Each route to a peer as "<prefix> mtu <n>". */
const mtus = (mode: PlanContext['mode'], peers: Peer[], over: Partial<PlanContext> = {}): string[] =>
  planHostFabric(ctx(mode, over), peers)
    .routes.filter((r) => r.type !== RTN_UNREACHABLE)
    .map((r) => `${r.destination} mtu ${r.mtu ?? '-'}`);

describe('fabric plan: route MTU to each peer (no kernel)', () => {
  it("vxlan: a peer's routes carry its uplink less VXLAN's 50 when that is less than our pod MTU", () => {
    expect(
      mtus('vxlan', [
        peer('small', '10.0.2.3', ['10.244.3.0/24'], 1400),
        peer('jumbo', '10.0.2.4', ['10.244.4.0/24'], 9000),
        peer('same', '10.0.2.5', ['10.244.5.0/24'], 1500),
      ]),
    ).to.deep.equal(['10.244.4.0/24 mtu 1450', '10.244.5.0/24 mtu 1450', '10.244.3.0/24 mtu 1350']);
  });

  it('vxlan over an IPv6 underlay: less 70, on every family the tunnel carries', () => {
    const v6: Underlay = {
      ...UNDERLAY,
      address: 'fd00::1',
      family: AF_INET6,
      subnets: [parseCidr('fd00::/64')],
    };
    const p = peer('small', '10.0.2.3', ['10.244.3.0/24', 'fd10:0:3::/64'], 1400, {
      underlay: ['fd00:2::3'],
    });
    expect(mtus('vxlan', [p], { underlay: v6 })).to.deep.equal([
      '10.244.3.0/24 mtu 1330',
      'fd10:0:3::/64 mtu 1330',
    ]);
  });

  it('routed: the uplink MTU the peer publishes, nothing taken for encapsulation', () => {
    expect(mtus('routed', [peer('near', '10.0.1.2', ['10.244.2.0/24'], 1400)])).to.deep.equal([
      '10.244.2.0/24 mtu 1400',
    ]);
  });

  it('hybrid: the pod MTU the peer has in the mode, on the direct path and over VXLAN alike', () => {
    expect(
      mtus('hybrid', [
        peer('near', '10.0.1.2', ['10.244.2.0/24'], 1400),
        peer('far', '10.0.2.3', ['10.244.3.0/24'], 1300),
      ]),
    ).to.deep.equal(['10.244.3.0/24 mtu 1250', '10.244.2.0/24 mtu 1350']);
  });

  it("routes a DPU's slices at its own overlay MTU, even routed directly, the rest at the node's", () => {
    const node = peer('dpunode', '10.0.1.3', ['10.244.4.0/24'], 1500, {
      endpoints: [
        {
          id: 'dpu-a',
          underlay: '10.0.1.10',
          mtu: 1400,
          vtep: { mac: '0e:77:0a:00:01:0a', vni: 30574, port: 4789 },
          prefixes: ['10.244.4.0/26'],
        },
      ],
    });
    expect(mtus('routed', [node])).to.deep.equal(['10.244.4.0/24 mtu 1500', '10.244.4.0/26 mtu 1350']);
    expect(mtus('vxlan', [node])).to.deep.equal(['10.244.4.0/24 mtu 1450', '10.244.4.0/26 mtu 1350']);
  });
});
