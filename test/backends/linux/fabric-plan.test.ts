import { expect } from 'chai';
import type { Peer, TunnelEndpoint } from '../../../core/peer-source';
import { planHostFabric } from '../../../backends/linux/fabric/plan/host-plan';
import { underlayPodMtu } from '../../../backends/linux/fabric/plan/route-mtu';
import type { PlanContext } from '../../../backends/linux/fabric/plan/wanted';
import { AF_INET6, RTN_UNREACHABLE } from '../../../lib/rtnetlink';
import { UNDERLAY, planContext } from '../../support/host-plan-context';

// What each mode asks of the kernel, decided without one: the plan is plain data.

const ctx = (mode: PlanContext['mode'], over: Partial<PlanContext> = {}): PlanContext =>
  planContext(mode, { clusterCidrs: ['10.244.0.0/16', 'fd10::/48'], ...over });

function peer(node: string, address: string, prefixes: string[], over: Partial<Peer> = {}): Peer {
  const [a, b, c, d] = address.split('.').map((x) => Number(x).toString(16).padStart(2, '0'));
  return {
    node,
    underlay: [address],
    mtu: 1500,
    vtep: { mac: `0e:77:${a}:${b}:${c}:${d}`, vni: 30574, port: 4789 },
    bootId: '',
    prefixes,
    ...over,
  };
}

const near = peer('near', '10.0.1.2', ['10.244.2.0/24', '10.244.12.0/24']);
const far = peer('far', '10.0.2.3', ['10.244.3.0/24', 'fd10:0:3::/64']);

describe('fabric plan (per mode, no kernel)', () => {
  it('keys a peer on the tunnel address it publishes, inside its own prefixes; else on the first address', () => {
    const tunnelled = peer('far', '10.0.2.3', ['10.244.3.0/24', 'fd10:0:3::/64'], {
      vtep: {
        mac: '0e:77:0a:00:02:03',
        vni: 30574,
        port: 4789,
        gateways: { 4: '10.244.3.17', 6: 'fd10:0:3::9' },
      },
    });
    const plan = planHostFabric(ctx('vxlan'), [tunnelled]);
    expect(plan.neighbours.map((n) => n.dst)).to.deep.equal(['10.244.3.17', 'fd10:0:3::9']);
    expect(plan.routes.filter((r) => r.peer).map((r) => `${r.destination} via ${r.gateway}`)).to.deep.equal([
      '10.244.3.0/24 via 10.244.3.17',
      'fd10:0:3::/64 via fd10:0:3::9',
    ]);
    // An address outside what the peer owns is not its to publish: today's first-address key.
    const foreign = peer('far', '10.0.2.3', ['10.244.3.0/24'], {
      vtep: { mac: '0e:77:0a:00:02:03', vni: 30574, port: 4789, gateways: { 4: '10.244.2.1' } },
    });
    const refused = planHostFabric(ctx('vxlan'), [foreign]);
    expect(refused.neighbours.map((n) => n.dst)).to.deep.equal(['10.244.3.0']);
    expect(refused.peers[0]?.reason).to.match(
      /published tunnel address 10\.244\.2\.1 ignored: not inside its own prefixes/,
    );
    expect(plan.peers[0]).to.not.have.property('reason');
  });

  it('routed: direct routes to the peer on our subnet only; the far one unreachable, with why', () => {
    const plan = planHostFabric(ctx('routed'), [far, near]);
    expect(
      plan.routes.map(
        (r) => `${r.destination} via ${r.gateway ?? '-'} oif ${r.oif ?? '-'} mtu ${r.mtu ?? '-'}`,
      ),
    ).to.deep.equal([
      '10.244.2.0/24 via 10.0.1.2 oif 2 mtu 1500',
      '10.244.12.0/24 via 10.0.1.2 oif 2 mtu 1500',
      '10.244.0.0/16 via - oif - mtu -',
      'fd10::/48 via - oif - mtu -',
    ]);
    expect(plan.routes.filter((r) => r.type === RTN_UNREACHABLE).map((r) => r.priority)).to.deep.equal([
      4294967295, 4294967295,
    ]);
    expect(plan.neighbours).to.deep.equal([]);
    expect(plan.fdb).to.deep.equal([]);
    const farPath = plan.peers.find((p) => p.node === 'far');
    expect(farPath?.path).to.equal('unreachable');
    expect(farPath?.reason).to.match(
      /10\.0\.2\.3 is not on a subnet of uplink eth0 \(10\.0\.1\.0\/24\).*never via a gateway/,
    );
  });

  it('vxlan: one FDB entry per peer, one neighbour per family it announces, one route per prefix', () => {
    const plan = planHostFabric(ctx('vxlan'), [near, far]);
    expect(plan.fdb.map((f) => `${f.mac} ${f.dst}`)).to.deep.equal([
      '0e:77:0a:00:02:03 10.0.2.3',
      '0e:77:0a:00:01:02 10.0.1.2',
    ]);
    expect(plan.neighbours.map((n) => `${n.family === AF_INET6 ? 6 : 4} ${n.dst} ${n.mac}`)).to.deep.equal([
      '4 10.244.3.0 0e:77:0a:00:02:03',
      '6 fd10:0:3:: 0e:77:0a:00:02:03',
      '4 10.244.2.0 0e:77:0a:00:01:02',
    ]);
    expect(
      plan.routes
        .filter((r) => r.type !== RTN_UNREACHABLE)
        .map((r) => `${r.destination} via ${r.gateway} onlink ${r.onlink} oif ${r.oif} mtu ${r.mtu}`),
    ).to.deep.equal([
      '10.244.3.0/24 via 10.244.3.0 onlink true oif 9 mtu 1450',
      'fd10:0:3::/64 via fd10:0:3:: onlink true oif 9 mtu 1450',
      '10.244.2.0/24 via 10.244.2.0 onlink true oif 9 mtu 1450',
      '10.244.12.0/24 via 10.244.2.0 onlink true oif 9 mtu 1450',
    ]);
  });

  it('hybrid: direct to the same subnet, VXLAN across it, and one pod MTU for both', () => {
    const plan = planHostFabric(ctx('hybrid'), [near, far]);
    expect(plan.peers.map((p) => `${p.node}:${p.path}`)).to.deep.equal(['far:vxlan', 'near:direct']);
    expect(new Set(plan.routes.filter((r) => r.mtu !== undefined).map((r) => r.mtu))).to.deep.equal(
      new Set([1450]),
    );
    expect(plan.fdb.map((f) => f.dst)).to.deep.equal(['10.0.2.3']);
  });

  it('refuses, per peer and with a reason, what it cannot reach', () => {
    const plan = planHostFabric(ctx('vxlan'), [
      peer('novtep', '10.0.2.4', ['10.244.4.0/24'], { vtep: undefined }),
      peer('othervni', '10.0.2.5', ['10.244.5.0/24'], {
        vtep: { mac: '0e:77:0a:00:02:05', vni: 7, port: 4789 },
      }),
      peer('samemac', '10.0.2.6', ['10.244.6.0/24'], {
        vtep: { mac: '0e:77:0a:00:01:01', vni: 30574, port: 4789 },
      }),
      peer('v6only', '10.0.2.7', ['10.244.7.0/24'], { underlay: ['fd00::7'] }),
      peer('a-first', '10.0.2.8', ['10.244.8.0/24']),
      peer('b-second', '10.0.2.9', ['10.244.8.0/24', 'not-a-cidr']),
    ]);
    const why = Object.fromEntries(plan.peers.map((p) => [p.node, `${p.path}: ${p.reason ?? ''}`]));
    expect(why.novtep).to.match(/^unreachable: the peer publishes no VTEP/);
    expect(why.othervni).to.match(
      /^unreachable: VTEP VNI 7 port 4789 differs from ours \(VNI 30574 port 4789\)/,
    );
    expect(why.samemac).to.match(/^unreachable: VTEP MAC 0e:77:0a:00:01:01 is this node's own/);
    expect(why.v6only).to.match(/^unreachable: no underlay address of IPv4/);
    expect(why['a-first']).to.equal('vxlan: ');
    expect(why['b-second']).to.match(
      /prefixes also announced by a-first \(10\.244\.8\.0\/24\).*not CIDRs: not-a-cidr/,
    );
    expect(plan.routes.filter((r) => r.destination === '10.244.8.0/24').map((r) => r.peer)).to.deep.equal([
      'a-first',
    ]);
  });

  it('external: nothing at all, every peer reported', () => {
    const plan = planHostFabric(ctx('external'), [near, far]);
    expect(plan.routes).to.deep.equal([]);
    expect(plan.peers.map((p) => `${p.node}:${p.path}`)).to.deep.equal(['far:external', 'near:external']);
  });

  it('pod MTU: the uplink less 50 over IPv4, 70 over IPv6, nothing routed', () => {
    expect(underlayPodMtu('routed', UNDERLAY)).to.equal(1500);
    expect(underlayPodMtu('vxlan', UNDERLAY)).to.equal(1450);
    expect(underlayPodMtu('hybrid', { ...UNDERLAY, family: AF_INET6 })).to.equal(1430);
  });
});

describe('fabric plan: peers with tunnel endpoints (DPUs)', () => {
  const mac = (address: string): string =>
    `0e:77:${address
      .split('.')
      .map((x) => Number(x).toString(16).padStart(2, '0'))
      .join(':')}`;
  const endpoint = (id: string, address: string, prefixes: string[]): TunnelEndpoint => ({
    id,
    underlay: address,
    mtu: 1500,
    vtep: { mac: mac(address), vni: 30574, port: 4789 },
    prefixes,
  });
  // A node whose pods sit behind two DPUs: no VXLAN device of its own, each DPU with a slice and a
  // borrowed /32; its third and fourth slices are held by no DPU.
  const dpuNode = peer('dpunode', '10.0.2.3', ['10.244.4.0/24'], {
    vtep: undefined,
    endpoints: [
      endpoint('dpu-a', '10.0.2.10', ['10.244.4.0/26', '10.244.4.200/32']),
      endpoint('dpu-b', '10.0.1.11', ['10.244.4.64/26', '10.244.4.150/32']),
    ],
  });
  const show = (plan: ReturnType<typeof planHostFabric>): Record<string, string[]> => ({
    routes: plan.routes
      .filter((r) => r.type !== RTN_UNREACHABLE)
      .map((r) => `${r.destination} via ${r.gateway} oif ${r.oif} onlink ${r.onlink}`),
    neigh: plan.neighbours.map((n) => `${n.dst} ${n.mac}`),
    fdb: plan.fdb.map((f) => `${f.mac} ${f.dst}`),
  });

  it('vxlan: one neighbour and FDB entry per endpoint VTEP, one route per slice and per borrowed /32 to it', () => {
    const plan = planHostFabric(ctx('vxlan'), [near, dpuNode]);
    expect(show(plan)).to.deep.equal({
      routes: [
        '10.244.4.0/26 via 10.244.4.0 oif 9 onlink true',
        '10.244.4.200/32 via 10.244.4.0 oif 9 onlink true',
        '10.244.4.64/26 via 10.244.4.64 oif 9 onlink true',
        '10.244.4.150/32 via 10.244.4.64 oif 9 onlink true',
        '10.244.2.0/24 via 10.244.2.0 oif 9 onlink true',
        '10.244.12.0/24 via 10.244.2.0 oif 9 onlink true',
      ],
      neigh: [
        '10.244.4.0 0e:77:0a:00:02:0a',
        '10.244.4.64 0e:77:0a:00:01:0b',
        '10.244.2.0 0e:77:0a:00:01:02',
      ],
      fdb: ['0e:77:0a:00:02:0a 10.0.2.10', '0e:77:0a:00:01:0b 10.0.1.11', '0e:77:0a:00:01:02 10.0.1.2'],
    });
    const p = plan.peers.find((x) => x.node === 'dpunode')!;
    expect(p.path).to.equal('vxlan');
    expect(p.prefixes).to.deep.equal(['10.244.4.0/24']);
    // What no endpoint holds has nowhere to go: the node runs no VTEP of its own.
    expect(p.reason).to.match(
      /^unreachable, covered by no endpoint: 10\.244\.4\.128\/28, .*10\.244\.4\.151\/32, .*10\.244\.4\.201\/32, .*10\.244\.4\.208\/28, 10\.244\.4\.224\/27 \(the peer publishes no VTEP/,
    );
    expect(p.reason).to.not.match(/10\.244\.4\.(150|200)\/32/);
  });

  it('hybrid: an endpoint on our subnet is routed directly to its own address, the other tunnelled', () => {
    const plan = planHostFabric(ctx('hybrid'), [dpuNode]);
    expect(show(plan)).to.deep.equal({
      routes: [
        '10.244.4.0/26 via 10.244.4.0 oif 9 onlink true',
        '10.244.4.200/32 via 10.244.4.0 oif 9 onlink true',
        '10.244.4.64/26 via 10.0.1.11 oif 2 onlink false',
        '10.244.4.150/32 via 10.0.1.11 oif 2 onlink false',
      ],
      neigh: ['10.244.4.0 0e:77:0a:00:02:0a'],
      fdb: ['0e:77:0a:00:02:0a 10.0.2.10'],
    });
  });

  it('routed: only the endpoint on our subnet; the far one and the uncovered rest are reported', () => {
    const plan = planHostFabric(ctx('routed'), [dpuNode]);
    expect(show(plan).routes).to.deep.equal([
      '10.244.4.64/26 via 10.0.1.11 oif 2 onlink false',
      '10.244.4.150/32 via 10.0.1.11 oif 2 onlink false',
    ]);
    const p = plan.peers[0]!;
    expect(p.path).to.equal('direct');
    expect(p.reason).to.match(
      /endpoint dpu-a \(10\.244\.4\.0\/26, 10\.244\.4\.200\/32\) unreachable: underlay 10\.0\.2\.10 is not on a subnet/,
    );
  });

  it("routes what no endpoint covers to the peer's own VTEP, with a gateway key outside every slice", () => {
    const mixed = peer('mixed', '10.0.2.4', ['10.244.5.0/24', '10.244.6.0/24'], {
      endpoints: [
        endpoint('d1', '10.0.2.20', ['10.244.5.0/25']),
        endpoint('d2', '10.0.2.21', ['10.244.6.0/24']),
      ],
    });
    expect(show(planHostFabric(ctx('vxlan'), [mixed]))).to.deep.equal({
      routes: [
        '10.244.5.0/24 via 10.244.5.128 oif 9 onlink true',
        '10.244.5.0/25 via 10.244.5.0 oif 9 onlink true',
        '10.244.6.0/24 via 10.244.6.0 oif 9 onlink true',
      ],
      neigh: [
        '10.244.5.128 0e:77:0a:00:02:04',
        '10.244.5.0 0e:77:0a:00:02:14',
        '10.244.6.0 0e:77:0a:00:02:15',
      ],
      fdb: ['0e:77:0a:00:02:04 10.0.2.4', '0e:77:0a:00:02:14 10.0.2.20', '0e:77:0a:00:02:15 10.0.2.21'],
    });
  });

  it("never routes an endpoint prefix outside the peer's own, nor one another endpoint claimed first, and says so", () => {
    const greedy = peer('greedy', '10.0.2.5', ['10.244.7.0/24'], {
      endpoints: [
        endpoint('d1', '10.0.2.30', ['10.244.7.0/25', '10.244.2.0/24']),
        endpoint('d2', '10.0.2.31', ['10.244.7.0/25']),
      ],
    });
    const plan = planHostFabric(ctx('vxlan'), [near, greedy]);
    expect(plan.routes.filter((r) => r.destination === '10.244.2.0/24').map((r) => r.peer)).to.deep.equal([
      'near',
    ]);
    expect(plan.routes.filter((r) => r.destination === '10.244.7.0/25').map((r) => r.gateway)).to.deep.equal([
      '10.244.7.0',
    ]);
    expect(plan.peers.find((p) => p.node === 'greedy')?.reason).to.match(
      /endpoint prefixes outside the peer's own prefixes, not routed: d1: 10\.244\.2\.0\/24, d2: 10\.244\.7\.0\/25/,
    );
  });

  it('an endpoint it cannot tunnel to is named with why, the others still programmed', () => {
    const odd = peer('odd', '10.0.2.6', ['10.244.8.0/24'], {
      vtep: undefined,
      endpoints: [
        {
          ...endpoint('d1', '10.0.2.40', ['10.244.8.0/25']),
          vtep: { mac: '0e:77:0a:00:02:28', vni: 9, port: 4789 },
        },
        endpoint('d2', '10.0.2.41', ['10.244.8.128/25']),
      ],
    });
    const plan = planHostFabric(ctx('vxlan'), [odd]);
    expect(show(plan).routes).to.deep.equal(['10.244.8.128/25 via 10.244.8.128 oif 9 onlink true']);
    expect(plan.peers[0]?.reason).to.match(
      /^endpoint d1 \(10\.244\.8\.0\/25\) unreachable: VTEP VNI 9 port 4789 differs/,
    );
  });
});
