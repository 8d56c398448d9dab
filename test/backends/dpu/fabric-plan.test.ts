import { expect } from 'chai';
import type { OwnPrefixes } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { FabricDesired } from '../../../backends/dpu/fabric-desired';
import {
  identityOwners,
  planFabric,
  type FabricAgent,
  type FabricBody,
} from '../../../backends/dpu/fabric-plan';
import { FabricPlanner } from '../../../backends/dpu/fabric-planner';
import { RouteVia } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { VX, n3 } from '../../support/fabric-fixtures';

// What each DPU of a node must hold for the fabric: its VTEP and slices, every remote tunnel endpoint
// (a DPU node's DPUs, a Linux node's VXLAN device, the DPUs beside it on its own node) and one route
// per remote prefix, never per pod. n3 is a Linux-backend node with a plain VTEP.

const settings = VX;
const a: FabricAgent = { id: 'dpu-a', address: '10.0.1.11', uplinkMtu: 1500 };
const b: FabricAgent = { id: 'dpu-b', address: '10.0.1.12', uplinkMtu: 9000 };
const own: OwnPrefixes = {
  ranges: ['10.244.0.0/24'],
  byEndpoint: new Map([
    ['dpu-a', ['10.244.0.0/26']],
    ['dpu-b', ['10.244.0.64/26', '10.244.0.200/32']],
  ]),
};

/** n2: a DPU node (no VTEP of its own, one DPU holding one slice of its /24). */
const n2: Peer = {
  node: 'n2',
  underlay: ['10.0.0.2'],
  mtu: 1500,
  bootId: 'b2',
  prefixes: ['10.244.1.0/24'],
  endpoints: [
    {
      id: 'dpu-x',
      underlay: '10.0.2.11',
      mtu: 1500,
      vtep: { mac: '0e:77:0a:00:02:0b', ...VX },
      prefixes: ['10.244.1.0/26'],
    },
  ],
};

const route = (prefix: string, peer: string, mtu: number): [string, FabricBody] => [
  `route/${prefix}`,
  { name: `route/${prefix}`, peerRoute: { prefix, peer, via: RouteVia.ROUTE_VIA_ENCAP, mtu } },
];

describe('DPU fabric plan', () => {
  it('gives a DPU its VTEP, its slices, every remote endpoint and one route per remote prefix', () => {
    const plan = planFabric({ node: 'n1', agent: a, locals: [a, b], peers: [n3, n2], own, settings });
    expect(Object.fromEntries(plan)).to.deep.equal(
      Object.fromEntries<FabricBody>([
        [
          'vtep',
          { name: 'vtep', localVtep: { address: '10.0.1.11', mac: '0e:77:0a:00:01:0b', ...VX, mtu: 1450 } },
        ],
        ['prefix/10.244.0.0/26', { name: 'prefix/10.244.0.0/26', localPrefix: { prefix: '10.244.0.0/26' } }],
        [
          'peer/n1/dpu-b',
          {
            name: 'peer/n1/dpu-b',
            peer: { node: 'n1', endpoint: 'dpu-b', address: '10.0.1.12', mac: '0e:77:0a:00:01:0c', ...VX },
          },
        ],
        route('10.244.0.64/26', 'peer/n1/dpu-b', 1450),
        route('10.244.0.200/32', 'peer/n1/dpu-b', 1450),
        [
          'peer/n2/dpu-x',
          {
            name: 'peer/n2/dpu-x',
            peer: { node: 'n2', endpoint: 'dpu-x', address: '10.0.2.11', mac: '0e:77:0a:00:02:0b', ...VX },
          },
        ],
        // n2's /24 beyond its DPU's slice has no VTEP to go to: no route, nothing sent to the host.
        route('10.244.1.0/26', 'peer/n2/dpu-x', 1450),
        [
          'peer/n3',
          {
            name: 'peer/n3',
            peer: { node: 'n3', endpoint: '', address: '10.0.0.3', mac: '0e:77:0a:00:00:03', ...VX },
          },
        ],
        route('10.244.2.0/24', 'peer/n3', 1450),
      ]),
    );
  });

  it('has two DPUs of one node see each other as peers, each with its own MTU, routed at the smaller', () => {
    const pa = planFabric({ node: 'n1', agent: a, locals: [a, b], peers: [], own, settings });
    const pb = planFabric({ node: 'n1', agent: b, locals: [a, b], peers: [], own, settings });
    expect([...pa.keys()].sort()).to.deep.equal(
      [
        'vtep',
        'prefix/10.244.0.0/26',
        'peer/n1/dpu-b',
        'route/10.244.0.64/26',
        'route/10.244.0.200/32',
      ].sort(),
    );
    expect([...pb.keys()].sort()).to.deep.equal(
      [
        'vtep',
        'prefix/10.244.0.64/26',
        'prefix/10.244.0.200/32',
        'peer/n1/dpu-a',
        'route/10.244.0.0/26',
      ].sort(),
    );
    expect(pb.get('peer/n1/dpu-a')?.peer).to.deep.include({
      node: 'n1',
      endpoint: 'dpu-a',
      address: '10.0.1.11',
    });
    expect(pb.get('route/10.244.0.0/26')?.peerRoute).to.deep.equal({
      prefix: '10.244.0.0/26',
      peer: 'peer/n1/dpu-a',
      via: RouteVia.ROUTE_VIA_ENCAP,
      // dpu-a's pods carry 1450: a larger packet from dpu-b's would be dropped past the tunnel.
      mtu: 1450,
    });
    expect(pb.get('vtep')?.localVtep?.mtu).to.equal(8950);
    expect(pa.get('route/10.244.0.64/26')?.peerRoute?.mtu).to.equal(1450);
  });

  it("routes a node's range to its own VTEP and its DPUs' slices to the DPUs", () => {
    const mixed: Peer = { ...n2, node: 'n4', vtep: { mac: '0e:77:0a:00:00:02', ...VX } };
    const plan = planFabric({ node: 'n1', agent: a, locals: [a], peers: [mixed], own, settings });
    expect(plan.get('route/10.244.1.0/24')?.peerRoute?.peer).to.equal('peer/n4');
    expect(plan.get('route/10.244.1.0/26')?.peerRoute?.peer).to.equal('peer/n4/dpu-x');
  });

  it('never routes its own prefixes elsewhere, and gives a prefix claimed twice to the first node by name', () => {
    const thief: Peer = { ...n3, node: 'n0', prefixes: ['10.244.0.0/26', '10.244.2.0/24'] };
    const plan = planFabric({ node: 'n1', agent: a, locals: [a], peers: [n3, thief], own, settings });
    expect(plan.has('route/10.244.0.0/26')).to.equal(false);
    expect(plan.get('route/10.244.2.0/24')?.peerRoute?.peer).to.equal('peer/n0');
  });

  it('deletes the objects of a peer that left, with newer generations, and resends nothing unchanged', () => {
    let gen = 0;
    const next = (): number => ++gen;
    const desired = new FabricDesired();
    const first = desired.set(
      planFabric({ node: 'n1', agent: a, locals: [a], peers: [n2, n3], own, settings }),
      next,
    );
    expect(first.deletes).to.deep.equal([]);
    const top = gen;
    const second = desired.set(
      planFabric({ node: 'n1', agent: a, locals: [a], peers: [n2], own, settings }),
      next,
    );
    expect(second.upserts, 'unchanged objects are not sent again').to.deep.equal([]);
    expect(second.deletes.map((d) => d.name).sort()).to.deep.equal(['peer/n3', 'route/10.244.2.0/24']);
    for (const d of second.deletes) expect(d.generation).to.be.greaterThan(top);
    expect(desired.snapshot().map((o) => o.name)).to.not.include('peer/n3');
  });

  it("routes a peer's prefixes at the MTU its pods carry when that is smaller, and follows a change in place", () => {
    let gen = 0;
    const next = (): number => ++gen;
    const planner = new FabricPlanner();
    const desired = new FabricDesired();
    const context = { node: 'n1', agent: b, locals: [b], own, settings };
    const mtuOf = (name: string): number | undefined =>
      desired.snapshot().find((o) => o.name === name)?.peerRoute?.mtu;
    const lowered = (p: Peer, mtu: number): Peer => ({
      ...p,
      mtu,
      endpoints: p.endpoints?.map((e) => ({ ...e, mtu })),
    });
    desired.set(planner.update(context, [lowered(n2, 1400), lowered(n3, 1400)]), next);
    // dpu-b's overlay carries 8950; n3's pods and n2's DPU carry 1400 less VXLAN's 50.
    expect(mtuOf('route/10.244.2.0/24')).to.equal(1350);
    expect(mtuOf('route/10.244.1.0/26')).to.equal(1350);

    const before = desired.snapshot().find((o) => o.name === 'route/10.244.2.0/24');
    const change = desired.set(planner.update(context, [lowered(n2, 1400), lowered(n3, 1300)]), next);
    expect(change.upserts.map((o) => o.name)).to.deep.equal(['route/10.244.2.0/24']);
    expect(change.deletes).to.deep.equal([]);
    expect(change.upserts[0]?.peerRoute?.mtu).to.equal(1250);
    expect(change.upserts[0]?.generation).to.be.greaterThan(before?.generation ?? Infinity);
    // A peer carrying more than the agent's overlay is routed at the overlay's.
    desired.set(planner.update(context, [lowered(n2, 1400), lowered(n3, 9216)]), next);
    expect(mtuOf('route/10.244.2.0/24')).to.equal(8950);
    expect(
      planFabric({ ...context, peers: [lowered(n2, 1400), lowered(n3, 1300)] }).get('route/10.244.2.0/24')
        ?.peerRoute?.mtu,
    ).to.equal(1250);
  });

  it("keeps the incumbent's FDB key when a newcomer that sorts first states its VTEP MAC or address", () => {
    const input = { node: 'n1', agent: a, locals: [a], own, settings };
    const before = planFabric({ ...input, peers: [n3] });
    // n0 states n3's MAC at another address, m0 n3's address with another MAC: both sort before n3.
    const n0: Peer = { ...n3, node: 'n0', underlay: ['10.0.0.9'], prefixes: ['10.244.9.0/24'] };
    const m0: Peer = {
      ...n3,
      node: 'm0',
      vtep: { mac: '0e:77:0a:00:00:99', ...VX },
      prefixes: ['10.244.8.0/24'],
    };
    const refused = new Map<string, string>();
    const plan = planFabric({ ...input, peers: [n0, m0, n3], held: identityOwners(before) }, refused);
    expect(plan.get('peer/n3')).to.deep.equal(before.get('peer/n3'));
    expect(plan.get('route/10.244.2.0/24')?.peerRoute?.peer).to.equal('peer/n3');
    for (const name of ['peer/n0', 'peer/m0', 'route/10.244.9.0/24', 'route/10.244.8.0/24'])
      expect(plan.has(name), `${name} left out`).to.equal(false);
    expect(Object.fromEntries(refused)).to.deep.equal({ 'peer/n0': 'peer/n3', 'peer/m0': 'peer/n3' });
    // Once n3 leaves, nothing holds what they state (they do not clash with each other).
    const after = planFabric({ ...input, peers: [n0, m0], held: identityOwners(plan) });
    expect(after.get('route/10.244.8.0/24')?.peerRoute?.peer).to.equal('peer/m0');
    expect(after.get('route/10.244.9.0/24')?.peerRoute?.peer).to.equal('peer/n0');
  });

  it("never lets a peer take the agent's own VTEP MAC or address, nor a DPU beside it", () => {
    const forger: Peer = {
      ...n3,
      node: 'n0',
      underlay: ['10.0.1.12'],
      vtep: { mac: '0e:77:0a:00:00:99', ...VX },
      prefixes: ['10.244.9.0/24'],
    };
    const planner = new FabricPlanner();
    const context = { node: 'n1', agent: a, locals: [a, b], own, settings };
    planner.update(context, [n3]);
    const plan = planner.update(context, [n3, forger]);
    expect(plan.has('peer/n0')).to.equal(false);
    expect(plan.get('peer/n1/dpu-b')?.peer?.address).to.equal('10.0.1.12');
    expect(plan.get('peer/n3')).to.not.equal(undefined);
    expect(Object.fromEntries(planner.refused)).to.deep.equal({ 'peer/n0': 'peer/n1/dpu-b' });
    const mine: Peer = { ...forger, underlay: ['10.0.1.11'] };
    expect(planner.update(context, [n3, mine]).has('peer/n0')).to.equal(false);
    expect(Object.fromEntries(planner.refused)).to.deep.equal({ 'peer/n0': 'vtep' });
  });
});
