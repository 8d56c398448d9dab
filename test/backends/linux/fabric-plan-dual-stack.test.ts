import { expect } from 'chai';
import type { Peer } from '../../../core/peer-source';
import { planHostFabric } from '../../../backends/linux/fabric/plan/host-plan';
import type { PlanContext } from '../../../backends/linux/fabric/plan/wanted';
import { AF_INET6 } from '../../../lib/rtnetlink';
import { planContext } from '../../support/host-plan-context';
import { vxlanPeer } from '../../support/fabric-fixtures';

// Dual-stack peers over an IPv4 underlay, as the plan decides them (no kernel): an IPv6 prefix cannot
// take an IPv4 next hop, so it goes through the tunnel wherever there is one — in hybrid mode to a
// peer on our subnet too, whose IPv4 prefixes go direct — and routed mode, without a tunnel, says it
// is not routed (its traffic meets the catch-all).

const ctx = (mode: PlanContext['mode']): PlanContext =>
  planContext(mode, { clusterCidrs: ['10.244.0.0/16', 'fd10::/48'] });

const peer = (
  node: string,
  address: string,
  mac: string,
  prefixes: string[],
  over: Partial<Peer> = {},
): Peer => vxlanPeer(node, address, prefixes, mac, over);

const near = peer('near', '10.0.1.2', '0e:77:0a:00:01:02', ['10.244.2.0/26', 'fd10::2:0/122']);
const far = peer('far', '10.0.2.3', '0e:77:0a:00:02:03', ['10.244.3.0/26', 'fd10::3:0/122']);

const shown = (plan: ReturnType<typeof planHostFabric>): string[] =>
  plan.routes.map(
    (r) => `${r.destination} via ${r.gateway ?? '-'} oif ${r.oif ?? '-'}${r.onlink ? ' onlink' : ''}`,
  );

describe('fabric plan: dual-stack peers over an IPv4 underlay (no kernel)', () => {
  it('hybrid: IPv4 direct to the peer on our subnet, its IPv6 through the tunnel; the far one tunnelled whole', () => {
    const plan = planHostFabric(ctx('hybrid'), [far, near]);
    expect(shown(plan)).to.deep.equal([
      '10.244.3.0/26 via 10.244.3.0 oif 9 onlink',
      'fd10::3:0/122 via fd10::3:0 oif 9 onlink',
      '10.244.2.0/26 via 10.0.1.2 oif 2',
      'fd10::2:0/122 via fd10::2:0 oif 9 onlink',
      '10.244.0.0/16 via - oif -',
      'fd10::/48 via - oif -',
    ]);
    // One neighbour per tunnelled family per peer: none of IPv4 for the direct one.
    expect(plan.neighbours.map((n) => `${n.family === AF_INET6 ? 6 : 4} ${n.dst} ${n.peer}`)).to.deep.equal([
      '4 10.244.3.0 far',
      '6 fd10::3:0 far',
      '6 fd10::2:0 near',
    ]);
    expect(plan.fdb).to.deep.equal([
      { mac: '0e:77:0a:00:02:03', dst: '10.0.2.3', peer: 'far' },
      { mac: '0e:77:0a:00:01:02', dst: '10.0.1.2', peer: 'near' },
    ]);
    expect(plan.peers.map((p) => [p.node, p.path, p.reason])).to.deep.equal([
      ['far', 'vxlan', undefined],
      ['near', 'direct', undefined],
    ]);
    expect(plan.routes.filter((r) => r.peer).every((r) => r.mtu === 1450)).to.equal(true);
  });

  it('hybrid: a peer on our subnet without a VTEP keeps IPv4 direct and says why its IPv6 is not routed', () => {
    const plan = planHostFabric(ctx('hybrid'), [{ ...near, vtep: undefined }]);
    expect(shown(plan).filter((r) => r.startsWith('fd10::2'))).to.deep.equal([]);
    expect(plan.fdb).to.deep.equal([]);
    expect(plan.peers[0]?.path).to.equal('direct');
    expect(plan.peers[0]?.reason).to.equal(
      'not routed directly (another family than the underlay): fd10::2:0/122; not over VXLAN either: the peer publishes no VTEP (it runs no VXLAN device)',
    );
  });

  it('routed: the IPv6 prefix is reported not routed and left to the catch-all', () => {
    const plan = planHostFabric(ctx('routed'), [near]);
    expect(shown(plan)).to.deep.equal([
      '10.244.2.0/26 via 10.0.1.2 oif 2',
      '10.244.0.0/16 via - oif -',
      'fd10::/48 via - oif -',
    ]);
    expect(plan.neighbours).to.deep.equal([]);
    expect(plan.peers[0]?.reason).to.equal(
      'not routed directly (another family than the underlay): fd10::2:0/122',
    );
  });
});
