import { expect } from 'chai';
import { PolicyBook } from '../../../core/policy/policy-book';
import { compilePolicy, type LocalPod } from '../../../core/policy/policy-compiler';
import type { CompiledPolicy } from '../../../core/policy-dataplane';
import type {
  LabelSelector,
  NetworkPolicy,
  PolicyPeer,
  PolicyPod,
  PolicyPort,
  PolicyProtocol,
  PolicyRule,
  PolicyState,
} from '../../../core/policy-source';
import { SeededRandom } from '../../support/seeded-random';
import { directionAllowed, type Endpoint } from '../../support/policy-reference';
import { compiledDirection } from './compiled-evaluator';

// Random small clusters, compiled and compared with the reference evaluator on every pair, protocol
// and port that this node enforces; and the incremental book compared with a fresh compile after
// random changes. Replay a failure with WORKLOADNET_POLICY_SEED.

const LOCAL_RANGES = ['10.1.0.0/16', 'fd01::/64'];
const NAMESPACES = ['n1', 'n2', 'n3'];
const PROTOCOLS: PolicyProtocol[] = ['TCP', 'UDP', 'SCTP'];
const PORTS = [53, 80, 81, 8080];

function randomSelector(r: SeededRandom): LabelSelector {
  switch (r.int(0, 3)) {
    case 0:
      return {};
    case 1:
      return { matchLabels: { app: r.pick(['web', 'db']) } };
    case 2: {
      const operator = r.pick(['In', 'NotIn', 'Exists', 'DoesNotExist'] as const);
      const key = r.pick(['app', 'tier', 'team']);
      const values =
        operator === 'In' || operator === 'NotIn' ? [r.pick(['web', 'db', 'fe', 'red'])] : undefined;
      return { matchExpressions: [{ key, operator, ...(values ? { values } : {}) }] };
    }
    default:
      return {
        matchLabels: { tier: r.pick(['fe', 'be']) },
        matchExpressions: [{ key: 'app', operator: 'Exists' }],
      };
  }
}

function randomPeer(r: SeededRandom): PolicyPeer {
  switch (r.int(0, 4)) {
    case 0:
      return { podSelector: randomSelector(r) };
    case 1:
      return { namespaceSelector: randomSelector(r) };
    case 2:
      return {
        podSelector: randomSelector(r),
        namespaceSelector: { matchLabels: { team: r.pick(['red', 'blue']) } },
      };
    case 3:
      return {
        ipBlock: {
          cidr: r.pick(['10.0.0.0/8', '10.1.0.0/16', '10.2.0.0/16']),
          except: r.chance(0.5) ? ['10.1.0.0/24', '10.2.3.0/24'] : [],
        },
      };
    default:
      return {
        ipBlock: { cidr: r.pick(['fd00::/8', 'fd01::/64']), except: r.chance(0.5) ? ['fd01::/120'] : [] },
      };
  }
}

function randomPort(r: SeededRandom): PolicyPort {
  const protocol = r.chance(0.2) ? undefined : r.pick(PROTOCOLS);
  switch (r.int(0, 3)) {
    case 0:
      return { protocol, port: r.pick(PORTS) };
    case 1:
      return { protocol, port: 80, endPort: r.pick([81, 8080]) };
    case 2:
      return { protocol, port: r.pick(['http', 'dns', 'alt']) };
    default:
      return { protocol };
  }
}

function randomRules(r: SeededRandom): PolicyRule[] {
  return Array.from({ length: r.int(0, 2) }, () => ({
    peers: Array.from({ length: r.int(0, 2) }, () => randomPeer(r)),
    ports: Array.from({ length: r.int(0, 2) }, () => randomPort(r)),
  }));
}

export function randomPolicy(r: SeededRandom, name: string): NetworkPolicy {
  const types = r.pick([['Ingress'], ['Egress'], ['Ingress', 'Egress']] as const);
  return {
    namespace: r.pick(NAMESPACES),
    name,
    podSelector: randomSelector(r),
    policyTypes: types,
    ingress: randomRules(r),
    egress: randomRules(r),
  };
}

export function randomLabels(r: SeededRandom): Record<string, string> {
  const labels: Record<string, string> = {};
  if (r.chance(0.7)) labels.app = r.pick(['web', 'db']);
  if (r.chance(0.5)) labels.tier = r.pick(['fe', 'be']);
  return labels;
}

function randomPod(r: SeededRandom, i: number, local: boolean): PolicyPod {
  const net = local ? 1 : 2;
  const ips = [`10.${net}.${r.int(0, 3)}.${i + 1}`];
  if (r.chance(0.4)) ips.push(`fd0${net}::${i + 1}`);
  const namedPorts = [
    ...(r.chance(0.6) ? [{ name: 'http', protocol: 'TCP' as const, port: r.pick([80, 8080]) }] : []),
    ...(r.chance(0.4) ? [{ name: 'dns', protocol: 'UDP' as const, port: 53 }] : []),
    ...(r.chance(0.3) ? [{ name: 'alt', protocol: r.pick(PROTOCOLS), port: 81 }] : []),
  ];
  return {
    namespace: r.pick(NAMESPACES),
    name: `p${i}`,
    uid: `u${i}`,
    labels: randomLabels(r),
    ips,
    namedPorts,
    nodeName: local ? 'me' : 'other',
    hostNetwork: false,
  };
}

export interface RandomCluster {
  state: PolicyState;
  locals: LocalPod[];
}

export function randomCluster(r: SeededRandom): RandomCluster {
  const namespaces = new Map(
    NAMESPACES.map((n) => [
      n,
      { name: n, labels: { name: n, ...(r.chance(0.5) ? { team: r.pick(['red', 'blue']) } : {}) } },
    ]),
  );
  const pods = new Map<string, PolicyPod>();
  const locals: LocalPod[] = [];
  for (let i = 0; i < r.int(3, 8); i++) {
    const local = r.chance(0.5);
    const pod = randomPod(r, i, local);
    pods.set(`${pod.namespace}/${pod.name}`, pod);
    if (local) locals.push({ key: `c${i}/eth0`, hostIf: `veth${i}`, ips: pod.ips, pod });
  }
  const policies = new Map<string, NetworkPolicy>();
  for (let i = 0; i < r.int(1, 4); i++) {
    const p = randomPolicy(r, `pol${i}`);
    policies.set(`${p.namespace}/${p.name}`, p);
  }
  return { state: { namespaces, pods, policies }, locals };
}

function endpoints(state: PolicyState): Endpoint[] {
  const out: Endpoint[] = [{ ip: '192.168.1.1' }, { ip: '10.1.0.200' }, { ip: 'fd01::ff' }];
  for (const [key, pod] of state.pods) for (const ip of pod.ips) out.push({ pod: key, ip });
  return out;
}

function mismatches(c: RandomCluster, program: CompiledPolicy): string[] {
  const out: string[] = [];
  const localIps = new Set(c.locals.flatMap((l) => l.ips));
  const all = endpoints(c.state);
  for (const from of all) {
    for (const to of all) {
      if (from === to || from.ip.includes(':') !== to.ip.includes(':')) continue;
      for (const protocol of PROTOCOLS) {
        for (const port of PORTS) {
          const what = `${from.pod ?? from.ip} -> ${to.pod ?? to.ip} ${port}/${protocol}`;
          for (const [type, holder] of [
            ['Egress', from],
            ['Ingress', to],
          ] as const) {
            if (
              localIps.has(holder.ip) &&
              directionAllowed(c.state, type, from, to, protocol, port) !==
                compiledDirection(program, type, from.ip, to.ip, protocol, port)
            )
              out.push(`${type.toLowerCase()} ${what}`);
          }
        }
      }
    }
  }
  return out;
}

/** A program in a form deep-equal compares regardless of map order. */
export function normalised(p: CompiledPolicy): unknown {
  return { sets: [...p.sets.entries()].sort(), pods: [...p.pods.entries()].sort() };
}

const SEED = Number(process.env.WORKLOADNET_POLICY_SEED ?? 20240611);

describe('policy compiler: random clusters against the reference evaluator', () => {
  it('compiles 300 random clusters to programs that allow exactly what the reference allows', () => {
    const r = new SeededRandom(SEED);
    for (let i = 0; i < 300; i++) {
      const c = randomCluster(r);
      const program = compilePolicy(c.state, c.locals, { localRanges: LOCAL_RANGES });
      const bad = mismatches(c, program);
      expect(
        bad,
        `state ${i} (seed ${SEED}): ${JSON.stringify([...c.state.policies.values()])}`,
      ).to.deep.equal([]);
    }
  });

  it('keeps the book equal to a fresh compile through 200 random change sequences', () => {
    const r = new SeededRandom(SEED + 1);
    for (let i = 0; i < 200; i++) {
      const c = randomCluster(r);
      const book = new PolicyBook(c.state, c.locals, { localRanges: LOCAL_RANGES });
      const first = compilePolicy(c.state, c.locals, { localRanges: LOCAL_RANGES });
      expect(normalised(book.program()), `sequence ${i}, first program`).to.deep.equal(normalised(first));
      let { state } = c;
      let locals = [...c.locals];
      for (let step = 0; step < 12; step++) {
        const pods = new Map(state.pods);
        const namespaces = new Map(state.namespaces);
        const policies = new Map(state.policies);
        const kind = r.int(0, 4);
        if (kind === 0 && pods.size) {
          const key = r.pick([...pods.keys()]);
          const pod = { ...pods.get(key)!, labels: randomLabels(r) };
          pods.set(key, pod);
          state = { namespaces, pods, policies };
          const attached = locals.find((l) => `${l.pod.namespace}/${l.pod.name}` === key);
          if (attached && r.chance(0.5)) {
            locals = locals.map((l) => (l === attached ? { ...l, pod } : l));
            book.addLocal({ ...attached, pod });
          }
          book.sourceChanged({ kind: 'pod', key }, state);
        } else if (kind === 1) {
          const name = r.pick(NAMESPACES);
          namespaces.set(name, { name, labels: { name, team: r.pick(['red', 'blue', 'green']) } });
          state = { namespaces, pods, policies };
          book.sourceChanged({ kind: 'namespace', name }, state);
        } else if (kind === 2) {
          const p = randomPolicy(r, `pol${r.int(0, 5)}`);
          const key = `${p.namespace}/${p.name}`;
          if (policies.has(key) && r.chance(0.4)) policies.delete(key);
          else policies.set(key, p);
          state = { namespaces, pods, policies };
          book.sourceChanged({ kind: 'policy', key }, state);
        } else if (kind === 3 && locals.length) {
          const gone = r.pick(locals);
          locals = locals.filter((l) => l !== gone);
          book.removeLocal(gone.key);
        } else {
          const pod = randomPod(r, 20 + step, true);
          const key = `${pod.namespace}/${pod.name}`;
          pods.set(key, pod);
          state = { namespaces, pods, policies };
          book.sourceChanged({ kind: 'pod', key }, state);
          const local = { key: `n${step}/eth0`, hostIf: `vethn${step}`, ips: pod.ips, pod };
          locals.push(local);
          book.addLocal(local);
        }
        const fresh = compilePolicy(state, locals, { localRanges: LOCAL_RANGES });
        expect(normalised(book.program()), `sequence ${i}, step ${step}`).to.deep.equal(normalised(fresh));
      }
    }
  });
});
