import { expect } from 'chai';
import fc from 'fast-check';
import type { OwnPrefixes } from '../../../core/fabric-dataplane';
import type { Peer, TunnelEndpoint } from '../../../core/peer-source';
import { FabricDesired } from '../../../backends/dpu/fabric-desired';
import { identityOwners, planFabric } from '../../../backends/dpu/fabric-plan';
import type { FabricAgent, FabricBody } from '../../../backends/dpu/fabric-plan';
import { FabricPlanner, type PlanContext } from '../../../backends/dpu/fabric-planner';
import { VX } from '../../support/fabric-fixtures';

// The plan kept between applies and changed per peer gives exactly what the whole plan gives, after
// any sequence of peers coming, changing and going, and of the node's own DPUs and slices changing;
// and fed to FabricDesired it sends the same changes (an object left alone keeps its generation).

const settings = VX;
const NODE = 'n1';
// Few names and overlapping prefixes, so that parts often claim the same prefix.
const NODES = ['n0', 'n1', 'n2', 'n3', 'n4', 'n5'];
const PREFIXES = [
  '10.244.0.0/24',
  '10.244.0.0/26',
  '10.244.0.64/26',
  '10.244.1.0/24',
  '10.244.1.0/26',
  '10.244.2.0/24',
  '10.244.2.7/32',
  'fd00:1::/64',
  'not-a-cidr',
];
const agentA: FabricAgent = { id: 'dpu-a', address: '10.0.1.11', uplinkMtu: 1500 };
const agentB: FabricAgent = { id: 'dpu-b', address: '10.0.1.12', uplinkMtu: 9000 };

const prefixes = fc.subarray(PREFIXES, { maxLength: 4 });
const endpoint: fc.Arbitrary<TunnelEndpoint> = fc.record({
  id: fc.constantFrom('e1', 'e2', 'e3'),
  underlay: fc.constantFrom('10.0.2.1', '10.0.2.2', 'fd00::2', 'nowhere'),
  mtu: fc.constantFrom(1400, 1500, 9000),
  vtep: fc.record({
    mac: fc.constantFrom('0e:77:0a:00:02:01', '0e:77:0a:00:02:02'),
    vni: fc.constant(30574),
    port: fc.constant(4789),
  }),
  prefixes,
});
const peer: fc.Arbitrary<Peer> = fc.record(
  {
    node: fc.constantFrom(...NODES),
    underlay: fc.subarray(['10.0.0.9', 'fd00::9'], { minLength: 0 }),
    mtu: fc.constantFrom(1400, 1500, 9000),
    bootId: fc.constantFrom('b1', 'b2'),
    vtep: fc.record({
      mac: fc.constantFrom('0e:77:0a:00:00:09', '0e:77:0a:00:00:08'),
      vni: fc.constant(30574),
      port: fc.constant(4789),
    }),
    endpoints: fc.uniqueArray(endpoint, { maxLength: 2, selector: (e) => e.id }),
    prefixes,
  },
  { requiredKeys: ['node', 'underlay', 'mtu', 'bootId', 'prefixes'] },
);
const own = fc.record({ a: prefixes, b: prefixes }).map((o): OwnPrefixes => ({
  ranges: ['10.244.0.0/24'],
  byEndpoint: new Map([
    ['dpu-a', o.a],
    ['dpu-b', o.b],
  ]),
}));

type Step =
  | { kind: 'set'; peer: Peer }
  | { kind: 'remove'; node: string }
  | { kind: 'own'; own: OwnPrefixes }
  | { kind: 'locals'; withB: boolean }
  | { kind: 'duplicate'; peer: Peer };

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: peer.map((p): Step => ({ kind: 'set', peer: p })) },
  { weight: 3, arbitrary: fc.constantFrom(...NODES).map((node): Step => ({ kind: 'remove', node })) },
  { weight: 1, arbitrary: own.map((o): Step => ({ kind: 'own', own: o })) },
  { weight: 1, arbitrary: fc.boolean().map((withB): Step => ({ kind: 'locals', withB })) },
  { weight: 1, arbitrary: peer.map((p): Step => ({ kind: 'duplicate', peer: p })) },
);

const sorted = (m: ReadonlyMap<string, FabricBody>): Array<[string, FabricBody]> =>
  [...m.entries()].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));

const changed = (c: ReturnType<FabricDesired['set']>): { upserts: string[]; deletes: string[] } => ({
  upserts: c.upserts.map((o) => o.name).sort(),
  deletes: c.deletes.map((d) => d.name).sort(),
});

const sameEntries = (a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean =>
  a.size === b.size && [...a].every(([k, v]) => b.get(k) === v);

describe('DPU fabric plan kept between applies (per-peer re-plan)', () => {
  it('equals the whole plan, and sends the same changes, after any sequence of changes', () => {
    fc.assert(
      fc.property(
        fc.array(peer, { maxLength: 6 }),
        own,
        fc.array(step, { minLength: 1, maxLength: 25 }),
        (initial, firstOwn, steps) => {
          // One record per node, as a peer source gives; the "duplicate" step breaks that on purpose.
          let table = [...new Map(initial.map((p) => [p.node, p])).values()];
          let ownNow = firstOwn;
          let locals = [agentA, agentB];
          const planners = new Map([agentA, agentB].map((a) => [a.id, new FabricPlanner()]));
          const kept = new Map([agentA, agentB].map((a) => [a.id, new FabricDesired()]));
          const whole = new Map([agentA, agentB].map((a) => [a.id, new FabricDesired()]));
          // What each agent's last plan held: the incumbents of the next one.
          const last = new Map<string, ReadonlyMap<string, FabricBody>>();
          let gen = 0;
          const next = (): number => ++gen;
          const check = (): void => {
            for (const agent of locals) {
              const context: PlanContext = { node: NODE, agent, locals, own: ownNow, settings };
              const held = identityOwners(last.get(agent.id) ?? new Map());
              const expected = planFabric({ ...context, peers: table, held });
              last.set(agent.id, expected);
              const planner = planners.get(agent.id) as FabricPlanner;
              const got = planner.update(context, table);
              expect(sorted(got)).to.deep.equal(sorted(expected));
              // What the store is given: the plan's holders, and a change only when one moved.
              const owners = identityOwners(expected);
              expect([...planner.holders].sort()).to.deep.equal([...owners].sort());
              expect(planner.holdersChanged).to.equal(!sameEntries(held, owners));
              const a = changed((kept.get(agent.id) as FabricDesired).set(got, next));
              const b = changed((whole.get(agent.id) as FabricDesired).set(expected, next));
              expect(a).to.deep.equal(b);
            }
          };
          check();
          for (const s of steps) {
            if (s.kind === 'set') table = [...table.filter((p) => p.node !== s.peer.node), s.peer];
            else if (s.kind === 'remove') table = table.filter((p) => p.node !== s.node);
            else if (s.kind === 'own') ownNow = s.own;
            else if (s.kind === 'locals') locals = s.withB ? [agentA, agentB] : [agentA];
            else table = [...table, s.peer];
            // Records come anew from a source each time: identity says nothing.
            table = table.map((p) => structuredClone(p));
            check();
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('re-plans only the peer that changed', () => {
    const peers: Peer[] = Array.from({ length: 50 }, (_, i) => ({
      node: `p${i}`,
      underlay: [`10.1.0.${i + 1}`],
      mtu: 1500,
      bootId: 'b',
      vtep: { mac: `0e:77:0a:01:00:${(i + 1).toString(16).padStart(2, '0')}`, ...settings },
      prefixes: [`10.245.${i}.0/24`],
    }));
    const context: PlanContext = {
      node: NODE,
      agent: agentA,
      locals: [agentA],
      own: { ranges: [], byEndpoint: new Map() },
      settings,
    };
    const planner = new FabricPlanner();
    const first = new Map(planner.update(context, peers));
    expect(planner.replanned).to.equal(50);
    const moved = peers.map((p) => structuredClone(p));
    moved[7] = { ...(moved[7] as Peer), prefixes: ['10.245.7.0/24', '10.246.0.0/24'] };
    const second = planner.update({ ...context }, moved);
    expect(planner.replanned).to.equal(1);
    // Objects of the peers left alone are the very objects planned before.
    expect(second.get('peer/p3')).to.equal(first.get('peer/p3'));
    expect(second.get('route/10.246.0.0/24')?.peerRoute?.peer).to.equal('peer/p7');
  });
});
