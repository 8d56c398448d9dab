// The policy compiler at the scale issue 40 names: 1,000 local pods, 2,000 pods elsewhere, 1,000
// policies over 20 namespaces. Measures the first compile, then single changes through PolicyBook
// (a pod's labels, a policy, a namespace's labels, an attachment added and removed), p50/p99/max.
// Run alone with: node dist/test/bench/policy-compile.bench.js

import { PolicyBook } from '../../core/policy/policy-book';
import { compilePolicy, type LocalPod } from '../../core/policy/policy-compiler';
import type { NetworkPolicy, PolicyNamespace, PolicyPod, PolicyState } from '../../core/policy-source';
import { SeededRandom } from '../support/seeded-random';

const NS = Array.from({ length: 20 }, (_, i) => `ns${i}`);
const r = new SeededRandom(7);

function makePod(i: number, local: boolean): PolicyPod {
  const namespace = NS[i % NS.length]!;
  const ip = local ? `10.1.${i >> 8}.${i & 255}` : `10.2.${i >> 8}.${i & 255}`;
  return {
    namespace,
    name: `pod${i}`,
    uid: `u${i}`,
    labels: { app: `app${r.int(0, 9)}`, tier: r.pick(['fe', 'be']) },
    ips: [ip],
    namedPorts: [{ name: 'http', protocol: 'TCP', port: r.pick([80, 8080]) }],
    nodeName: local ? 'me' : 'other',
    hostNetwork: false,
  };
}

function makePolicy(i: number): NetworkPolicy {
  const namespace = NS[i % NS.length]!;
  return {
    namespace,
    name: `pol${i}`,
    podSelector: { matchLabels: { app: `app${Math.floor(i / 20) % 10}` } },
    policyTypes: ['Ingress', 'Egress'],
    ingress: [
      {
        peers: [{ podSelector: { matchLabels: { app: `app${(i + 1) % 10}` } } }],
        ports: [{ port: 80 + (i % 5) }],
      },
      {
        peers: [
          { namespaceSelector: { matchLabels: { team: `t${i % 4}` } } },
          { ipBlock: { cidr: '10.0.0.0/8', except: [`10.2.${i % 8}.0/24`] } },
        ],
      },
    ],
    egress: [
      {
        peers: [
          {
            namespaceSelector: { matchLabels: { team: `t${i % 4}` } },
            podSelector: { matchLabels: { tier: 'be' } },
          },
        ],
        ports: [{ port: 'http' }],
      },
    ],
  };
}

function stats(name: string, ms: number[]): void {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!.toFixed(2);
  console.log(
    `${name.padEnd(28)} n=${s.length}  p50 ${q(0.5)} ms  p99 ${q(0.99)} ms  max ${s[s.length - 1]!.toFixed(2)} ms`,
  );
}

function time(fn: () => void): number {
  const t = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

function main(): void {
  const namespaces = new Map<string, PolicyNamespace>(
    NS.map((n, i) => [n, { name: n, labels: { team: `t${i % 4}` } }]),
  );
  const pods = new Map<string, PolicyPod>();
  const locals: LocalPod[] = [];
  for (let i = 0; i < 3000; i++) {
    const pod = makePod(i, i < 1000);
    pods.set(`${pod.namespace}/${pod.name}`, pod);
    if (i < 1000) locals.push({ key: `c${i}/eth0`, hostIf: `veth${i}`, ips: pod.ips, pod });
  }
  const policies = new Map(
    Array.from({ length: 1000 }, (_, i) => [`${NS[i % 20]}/pol${i}`, makePolicy(i)] as const),
  );
  let state: PolicyState = { namespaces, pods, policies };
  const options = { localRanges: ['10.1.0.0/16'] };
  let program = compilePolicy(state, locals, options);
  console.log(
    `whole compile: ${time(() => (program = compilePolicy(state, locals, options))).toFixed(1)} ms, ${program.pods.size} pods, ${program.sets.size} sets, ${[...program.pods.values()].reduce((n, p) => n + (p.ingress?.rules.length ?? 0) + (p.egress?.rules.length ?? 0), 0)} rules`,
  );
  let book!: PolicyBook;
  console.log(
    `book first build: ${time(() => (book = new PolicyBook(state, locals, options))).toFixed(1)} ms`,
  );
  const podKeys = [...pods.keys()];
  const labelMs: number[] = [];
  const policyMs: number[] = [];
  const nsMs: number[] = [];
  const attachMs: number[] = [];
  for (let i = 0; i < 300; i++) {
    const key = r.pick(podKeys);
    const next = new Map(state.pods);
    next.set(key, { ...pods.get(key)!, labels: { app: `app${r.int(0, 9)}`, tier: r.pick(['fe', 'be']) } });
    state = { ...state, pods: next };
    labelMs.push(time(() => book.sourceChanged({ kind: 'pod', key }, state)));

    const pi = r.int(0, 999);
    const pol = { ...makePolicy(pi), podSelector: { matchLabels: { app: `app${r.int(0, 9)}` } } };
    const nextPolicies = new Map(state.policies).set(`${pol.namespace}/${pol.name}`, pol);
    state = { ...state, policies: nextPolicies };
    policyMs.push(
      time(() => book.sourceChanged({ kind: 'policy', key: `${pol.namespace}/${pol.name}` }, state)),
    );

    const name = r.pick(NS);
    const nextNs = new Map(state.namespaces).set(name, { name, labels: { team: `t${r.int(0, 3)}` } });
    state = { ...state, namespaces: nextNs };
    nsMs.push(time(() => book.sourceChanged({ kind: 'namespace', name }, state)));

    const l = locals[r.int(0, 999)]!;
    attachMs.push(time(() => book.removeLocal(l.key)));
    attachMs.push(time(() => book.addLocal(l)));
  }
  console.log(
    `first label changes: ${labelMs
      .slice(0, 3)
      .map((m) => m.toFixed(2))
      .join(', ')} ms`,
  );
  stats('pod label change', labelMs);
  stats('policy change', policyMs);
  stats('namespace label change', nsMs);
  stats('attachment removed / added', attachMs);
  const t = time(() => book.program());
  console.log(`program() snapshot: ${t.toFixed(2)} ms`);
}

main();
