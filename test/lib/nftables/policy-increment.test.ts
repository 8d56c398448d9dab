import { expect } from 'chai';
import { diffText } from '../../../lib/nftables/policy-diff';
import {
  incrementalDiff,
  usersAndOwners,
  type LastRendering,
  type RenderedPod,
} from '../../../lib/nftables/policy-increment';
import type { NftPodPolicy, NftPolicyProgram, NftPolicyRule } from '../../../lib/nftables/policy-program';
import { renderProgram, stateOf, type RulesetState } from '../../../lib/nftables/policy-ruleset';
import { SeededRandom } from '../../support/seeded-random';

// The transaction worked out from what changed must leave the table exactly as the whole rendering
// would: random sequences of programs (pods added, changed, moved to another interface and removed;
// set members changed; sets added), each step taken incrementally and compared with a fresh render.

const SETS = ['s0', 's1', 's2', 's3'];

function rule(r: SeededRandom): NftPolicyRule {
  const sets = r.next() < 0.2 ? undefined : SETS.filter(() => r.next() < 0.4);
  const ports =
    r.next() < 0.3 ? undefined : [{ protocol: r.pick(['TCP', 'UDP'] as const), port: r.pick([80, 81, 443]) }];
  return { sets, ports };
}

function pod(r: SeededRandom, i: number, hostIf = `wn${i}`): NftPodPolicy {
  // Few distinct rule sets, so that pods share chains as replicas do.
  const shape = new SeededRandom(r.int(0, 5));
  const dir = (): { rules: NftPolicyRule[] } | undefined =>
    shape.next() < 0.3 ? undefined : { rules: [rule(shape), rule(shape)].slice(0, shape.int(0, 2)) };
  return { key: `w${i}/eth0`, hostIf, ingress: dir(), egress: dir() };
}

const members = (r: SeededRandom): string[] =>
  Array.from({ length: r.int(0, 3) }, () => `10.9.${r.int(0, 3)}.${r.int(1, 9)}/32`).filter(
    (p, i, all) => all.indexOf(p) === i,
  );

function step(r: SeededRandom, prev: NftPolicyProgram): NftPolicyProgram {
  const pods = new Map(prev.pods);
  const sets = new Map(prev.sets);
  for (let n = r.int(1, 3); n > 0; n--) {
    const i = r.int(0, 11);
    const key = `w${i}/eth0`;
    const what = r.next();
    if (what < 0.35) pods.set(key, pod(r, i));
    else if (what < 0.5) pods.delete(key);
    else if (what < 0.6 && pods.has(key)) pods.set(key, { ...pods.get(key)!, hostIf: `wx${i}` });
    else sets.set(r.pick(SETS), members(r));
  }
  return { sets, pods };
}

function comparable(s: RulesetState): unknown {
  const sorted = <T>(m: Map<string, T>): [string, T][] => [...m].sort(([a], [b]) => a.localeCompare(b));
  return {
    sets: sorted(s.sets).map(([n, e]) => [n, [...e].sort()]),
    vmaps: sorted(s.vmaps).map(([n, m]) => [n, sorted(m)]),
    chains: sorted(s.chains),
  };
}

describe('nftables policy: the transaction worked out from what changed', () => {
  it('leaves the table as the whole rendering would, through 300 random sequences of changes', () => {
    let incremental = 0;
    for (let seed = 1; seed <= 300; seed++) {
      const r = new SeededRandom(seed);
      let program: NftPolicyProgram = { sets: new Map(SETS.map((s) => [s, members(r)])), pods: new Map() };
      const first = renderProgram(program);
      const held = stateOf(first);
      const pods = new Map<string, RenderedPod>();
      for (const p of program.pods.values()) pods.set(p.key, { pod: p, chains: first.byPod.get(p.key)! });
      const last: LastRendering = {
        pods,
        sets: new Map([...program.sets].map(([n, prefixes]) => [n, { prefixes, sets: first.bySet.get(n)! }])),
        ...usersAndOwners(pods),
      };
      for (let k = 0; k < 12; k++) {
        program = step(r, program);
        const inc = incrementalDiff(program, last, held, (p, prev) => prev.pod === p);
        expect(inc, `seed ${seed} step ${k}: worked out incrementally`).to.not.equal(undefined);
        inc!.commit();
        incremental++;
        const whole = renderProgram(program);
        expect(comparable(held), `seed ${seed} step ${k}\n${diffText(inc!.diff)}`).to.deep.equal(
          comparable(stateOf(whole)),
        );
        expect(usersAndOwners(last.pods)).to.deep.equal({ users: last.users, owners: last.owners });
      }
    }
    expect(incremental).to.equal(300 * 12);
  });

  it('leaves to the whole rendering a set that is removed or changes kind', () => {
    const program: NftPolicyProgram = { sets: new Map([['s0', ['10.9.0.1/32']]]), pods: new Map() };
    const first = renderProgram(program);
    const last: LastRendering = {
      pods: new Map(),
      sets: new Map([['s0', { prefixes: ['10.9.0.1/32'], sets: first.bySet.get('s0')! }]]),
      users: new Map(),
      owners: new Map(),
    };
    const keep = (): boolean => true;
    expect(incrementalDiff({ sets: new Map(), pods: new Map() }, last, stateOf(first), keep)).to.equal(
      undefined,
    );
    const wider = { sets: new Map([['s0', ['10.9.0.0/24']]]), pods: new Map() };
    expect(incrementalDiff(wider, last, stateOf(first), keep)).to.equal(undefined);
  });
});
