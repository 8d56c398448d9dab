import { expect } from 'chai';
import { planHostFabric } from '../../../backends/linux/fabric/plan/host-plan';
import type { FabricPlan, PlanContext } from '../../../backends/linux/fabric/plan/wanted';
import { planContext } from '../../support/host-plan-context';
import { vxlanPeer } from '../../support/fabric-fixtures';
import type { Peer } from '../../../core/peer-source';

// One holder per identity: a newcomer stating a live peer's VTEP MAC, underlay address, gateway key
// or prefix is refused with the holder named, whatever its name's place in the order, and the holder
// keeps its objects; the newcomer gets it at the first plan after the holder lets it go.

const ctx = (mode: PlanContext['mode'], last?: FabricPlan): PlanContext =>
  planContext(mode, { holders: last?.holders });

const peer = vxlanPeer;

const n3 = peer('n3', '10.0.2.3', ['10.244.3.0/24'], '0e:77:0a:00:02:03');
const n4 = peer('n4', '10.0.2.4', ['10.244.4.0/24'], '0e:77:0a:00:02:04');
const objects = (plan: FabricPlan, node: string): string[] => [
  ...plan.routes.filter((r) => r.peer === node).map((r) => `route ${r.destination} via ${r.gateway}`),
  ...plan.neighbours.filter((n) => n.peer === node).map((n) => `neigh ${n.dst} ${n.mac}`),
  ...plan.fdb.filter((f) => f.peer === node).map((f) => `fdb ${f.mac} ${f.dst}`),
];
const pathOf = (plan: FabricPlan, node: string) => plan.peers.find((p) => p.node === node);

describe('fabric plan: the incumbent keeps its identities', () => {
  const before = planHostFabric(ctx('vxlan'), [n3, n4]);
  const n3Objects = [
    'route 10.244.3.0/24 via 10.244.3.0',
    'neigh 10.244.3.0 0e:77:0a:00:02:03',
    'fdb 0e:77:0a:00:02:03 10.0.2.3',
  ];

  /** Plans `newcomer` beside n3 and n4 after `before`: n3 keeps all it had, the newcomer gets nothing. */
  function planRefused(newcomer: Peer): FabricPlan {
    const plan = planHostFabric(ctx('vxlan', before), [newcomer, n3, n4]);
    expect(objects(plan, 'n3')).to.deep.equal(n3Objects);
    expect(objects(plan, newcomer.node)).to.deep.equal([]);
    return plan;
  }

  it("keeps the incumbent's route and FDB entry when a newcomer named before it states its VTEP MAC", () => {
    const aaa = peer('aaa', '10.0.9.9', ['10.244.9.0/24'], '0e:77:0a:00:02:03');
    const plan = planRefused(aaa);
    const why = pathOf(plan, 'aaa');
    expect(why?.path).to.equal('unreachable');
    expect(why?.reason).to.match(/VTEP MAC 0e:77:0a:00:02:03 is held by n3/);
    expect(why?.refused).to.deep.equal([{ claim: 'mac', value: '0e:77:0a:00:02:03', holder: 'n3' }]);
    expect(pathOf(plan, 'n3')).to.not.have.property('reason');
    // The holder leaves: the newcomer has it at the next plan.
    const after = planHostFabric(ctx('vxlan', plan), [aaa, n4]);
    expect(objects(after, 'aaa')).to.include('fdb 0e:77:0a:00:02:03 10.0.9.9');
    // And keeps it from then on, against the node that held it before.
    const back = planHostFabric(ctx('vxlan', after), [aaa, n3, n4]);
    expect(objects(back, 'aaa')).to.include('fdb 0e:77:0a:00:02:03 10.0.9.9');
    expect(pathOf(back, 'n3')?.reason).to.match(/VTEP MAC 0e:77:0a:00:02:03 is held by aaa/);
  });

  it("refuses a newcomer stating a live peer's underlay address (its FDB entry would send to that node)", () => {
    const aaa = peer('aaa', '10.0.2.3', ['10.244.9.0/24'], '0e:77:0a:00:09:09');
    const plan = planRefused(aaa);
    expect(pathOf(plan, 'aaa')?.reason).to.match(/underlay address 10\.0\.2\.3 is held by n3/);
  });

  it("refuses a newcomer stating this node's own underlay address", () => {
    const plan = planHostFabric(ctx('hybrid'), [
      peer('aaa', '10.0.1.1', ['10.244.9.0/24'], '0e:77:0a:00:09:09'),
    ]);
    expect(objects(plan, 'aaa')).to.deep.equal([]);
    expect(pathOf(plan, 'aaa')?.reason).to.match(/underlay address 10\.0\.1\.1 is this node's own/);
  });

  it("refuses a newcomer the gateway key a live peer's routes use, and says why it has no route", () => {
    // A /25 inside n3's /24: its first address is n3's gateway key.
    const aaa = peer('aaa', '10.0.9.9', ['10.244.3.0/25'], '0e:77:0a:00:09:09');
    const plan = planRefused(aaa);
    const why = pathOf(plan, 'aaa');
    expect(why?.path).to.equal('unreachable');
    expect(why?.reason).to.match(
      /not routed, no gateway key free: 10\.244\.3\.0\/25; gateway key 10\.244\.3\.0 is held by n3/,
    );
    expect(why?.refused?.map((r) => r.claim)).to.deep.equal(['gateway']);
  });

  it('leaves a prefix with the peer that announced it first, whatever the newcomer is named', () => {
    const aaa = peer('aaa', '10.0.9.9', ['10.244.3.0/24'], '0e:77:0a:00:09:09');
    const plan = planHostFabric(ctx('vxlan', before), [aaa, n3, n4]);
    expect(objects(plan, 'n3')).to.deep.equal(n3Objects);
    expect(pathOf(plan, 'aaa')?.reason).to.match(/prefixes also announced by n3 \(10\.244\.3\.0\/24\)/);
  });

  it('lets the first by name win between two newcomers, as before', () => {
    const a = peer('a', '10.0.9.8', ['10.244.8.0/24'], '0e:77:0a:00:09:09');
    const b = peer('b', '10.0.9.9', ['10.244.9.0/24'], '0e:77:0a:00:09:09');
    const plan = planHostFabric(ctx('vxlan', before), [b, a, n3]);
    expect(objects(plan, 'a')).to.include('fdb 0e:77:0a:00:09:09 10.0.9.8');
    expect(pathOf(plan, 'b')?.reason).to.match(/VTEP MAC 0e:77:0a:00:09:09 is held by a/);
  });
});
