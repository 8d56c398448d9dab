// The upstream Kubernetes e2e NetworkPolicy cases (test/e2e/network/netpol) as data: namespaces x, y,
// z (labelled ns=<name>), pods a, b, c in each (labelled pod=<name>, serving 80 and 81 on TCP and
// UDP under the names serve-80-tcp ...). Each case is a list of steps; a step applies changes and
// states the reachability expected afterwards, written out from the upstream test's expectation:
// a default, then rules applied in order ("deny * -> x/*", "allow y/b -> x/a 81/TCP"; `*` and `ns/*`
// match any pod, a port limits a rule to that probe). Pairs of a pod with itself are not probed.
//
// Pod addresses come from the runner (an `AddressOf`), so the same cases run against the compiler
// here and against real namespaces whose pods the kernel addressed; ipBlocks are built from them.

import type {
  LabelSelector,
  NetworkPolicy,
  PolicyChange,
  PolicyPeer,
  PolicyPod,
  PolicyProtocol,
  PolicyRule,
  PolicyState,
} from '../../core/policy-source';

export const CASE_NAMESPACES = ['x', 'y', 'z'] as const;
export const CASE_PODS = ['a', 'b', 'c'] as const;
/** Every pod, as `namespace/name`. */
export const CASE_POD_KEYS = CASE_NAMESPACES.flatMap((ns) => CASE_PODS.map((p) => `${ns}/${p}`));

export type AddressOf = (pod: string) => string;
export type ProbePort = `${number}/${PolicyProtocol}`;

export interface CaseStep {
  what: string;
  /** Policies added or replaced (by namespace/name), built from the pods' addresses. */
  policies?: (ip: AddressOf) => NetworkPolicy[];
  deletePolicies?: string[];
  /** New labels of pods (`namespace/name`): the whole set. */
  podLabels?: Record<string, Record<string, string>>;
  namespaceLabels?: Record<string, Record<string, string>>;
  probes: ProbePort[];
  expect: { default: 'allow' | 'deny'; rules: string[] };
}

export interface PolicyCase {
  name: string;
  steps: CaseStep[];
}

/** Fixed addresses for runs without real pods: x/a 10.77.1.1, x/b 10.77.1.2, y/a 10.77.2.1 ... */
export function fixedAddress(pod: string): string {
  const [ns, name] = pod.split('/') as [string, string];
  return `10.77.${CASE_NAMESPACES.indexOf(ns as 'x') + 1}.${CASE_PODS.indexOf(name as 'a') + 1}`;
}

export const hostCidr = (ip: string): string => `${ip}/${ip.includes(':') ? 128 : 32}`;
export const everyCidr = (ip: string): string => (ip.includes(':') ? '::/0' : '0.0.0.0/0');

/** The pods as a source would give them, with their container ports. */
export function casePod(key: string, ip: string, labels?: Record<string, string>): PolicyPod {
  const [namespace, name] = key.split('/') as [string, string];
  return {
    namespace,
    name,
    uid: `uid-${namespace}-${name}`,
    labels: labels ?? { pod: name },
    ips: [ip],
    namedPorts: [80, 81].flatMap((port) =>
      (['TCP', 'UDP'] as const).map((protocol) => ({
        name: `serve-${port}-${protocol.toLowerCase()}`,
        protocol,
        port,
      })),
    ),
    nodeName: 'node-1',
    hostNetwork: false,
  };
}

export function caseState(ip: AddressOf): PolicyState {
  return {
    namespaces: new Map(CASE_NAMESPACES.map((ns) => [ns, { name: ns, labels: { ns } }])),
    pods: new Map(CASE_POD_KEYS.map((k) => [k, casePod(k, ip(k))])),
    policies: new Map(),
  };
}

/** A policy with the API's policyTypes default (Ingress, plus Egress when it has egress rules). */
export function casePolicy(
  key: string,
  podSelector: LabelSelector,
  rules: { ingress?: PolicyRule[]; egress?: PolicyRule[]; types?: Array<'Ingress' | 'Egress'> },
): NetworkPolicy {
  const [namespace, name] = key.split('/') as [string, string];
  const types = rules.types ?? ['Ingress', ...(rules.egress?.length ? (['Egress'] as const) : [])];
  return {
    namespace,
    name,
    podSelector,
    policyTypes: types,
    ingress: rules.ingress ?? [],
    egress: rules.egress ?? [],
  };
}

const pod = (name: string): LabelSelector => ({ matchLabels: { pod: name } });
const ns = (name: string): LabelSelector => ({ matchLabels: { ns: name } });
const from = (...peers: PolicyPeer[]): PolicyRule => ({ peers });
const TCP80: ProbePort[] = ['80/TCP'];
const TCP80_81: ProbePort[] = ['80/TCP', '81/TCP'];

export const POLICY_CASES: PolicyCase[] = [
  {
    name: 'default-deny-ingress',
    steps: [
      {
        what: 'deny all ingress in x',
        policies: () => [casePolicy('x/deny', {}, { types: ['Ingress'] })],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/*'] },
      },
    ],
  },
  {
    name: 'default-deny-egress',
    steps: [
      {
        what: 'deny all egress in x',
        policies: () => [casePolicy('x/deny', {}, { types: ['Egress'] })],
        probes: ['80/TCP', '80/UDP'],
        expect: { default: 'allow', rules: ['deny x/* -> *'] },
      },
    ],
  },
  {
    name: 'allow-all ingress',
    // Upstream applies the allow-all policy alone, which a node enforcing nothing passes too; here it
    // goes on top of a default deny, so the step shows the union opening what the deny closed.
    steps: [
      {
        what: 'deny all ingress in x',
        policies: () => [casePolicy('x/deny', {}, { types: ['Ingress'] })],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/*'] },
      },
      {
        what: 'allow every peer into x, beside the deny',
        policies: () => [casePolicy('x/all', {}, { ingress: [{}] })],
        probes: TCP80,
        expect: { default: 'allow', rules: [] },
      },
    ],
  },
  {
    name: 'deny ingress from other namespaces',
    steps: [
      {
        what: 'x pods accept only x pods',
        policies: () => [casePolicy('x/same-ns', {}, { ingress: [from({ podSelector: {} })] })],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny y/* -> x/*', 'deny z/* -> x/*'] },
      },
    ],
  },
  {
    name: 'allow by pod: PodSelector with MatchExpressions',
    steps: [
      {
        what: 'x/a accepts pod In [b] of x',
        policies: () => [
          casePolicy('x/by-pod', pod('a'), {
            ingress: [
              from({ podSelector: { matchExpressions: [{ key: 'pod', operator: 'In', values: ['b'] }] } }),
            ],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow x/b -> x/a'] },
      },
    ],
  },
  {
    name: 'allow by namespace: NamespaceSelector with MatchExpressions',
    steps: [
      {
        what: 'x/a accepts namespaces In [y]',
        policies: () => [
          casePolicy('x/by-ns', pod('a'), {
            ingress: [
              from({
                namespaceSelector: { matchExpressions: [{ key: 'ns', operator: 'In', values: ['y'] }] },
              }),
            ],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow y/* -> x/a'] },
      },
    ],
  },
  {
    name: 'allow by PodSelector or NamespaceSelector',
    steps: [
      {
        what: 'x/a accepts x pods NotIn [a], and namespaces NotIn [x]',
        policies: () => [
          casePolicy('x/or', pod('a'), {
            ingress: [
              from(
                { podSelector: { matchExpressions: [{ key: 'pod', operator: 'NotIn', values: ['a'] }] } },
                {
                  namespaceSelector: { matchExpressions: [{ key: 'ns', operator: 'NotIn', values: ['x'] }] },
                },
              ),
            ],
          }),
        ],
        probes: TCP80,
        expect: {
          default: 'allow',
          rules: [
            'deny * -> x/a',
            'allow x/b -> x/a',
            'allow x/c -> x/a',
            'allow y/* -> x/a',
            'allow z/* -> x/a',
          ],
        },
      },
    ],
  },
  {
    name: 'allow by PodSelector and NamespaceSelector',
    steps: [
      {
        what: 'x/a accepts pod b of namespaces NotIn [x]',
        policies: () => [
          casePolicy('x/and', pod('a'), {
            ingress: [
              from({
                podSelector: pod('b'),
                namespaceSelector: { matchExpressions: [{ key: 'ns', operator: 'NotIn', values: ['x'] }] },
              }),
            ],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow y/b -> x/a', 'allow z/b -> x/a'] },
      },
    ],
  },
  {
    name: 'multiple stacked policies with overlapping podSelectors',
    steps: [
      {
        what: 'x/a accepts y (one policy) and z (another)',
        policies: () => [
          casePolicy('x/from-y', pod('a'), { ingress: [from({ namespaceSelector: ns('y') })] }),
          casePolicy('x/from-z', {}, { ingress: [from({ namespaceSelector: ns('z') })] }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/*', 'allow z/* -> x/*', 'allow y/* -> x/a'] },
      },
    ],
  },
  {
    name: 'ports: allow only 81 from y',
    steps: [
      {
        what: 'x/a accepts y on 81/TCP',
        policies: () => [
          casePolicy('x/port-81', pod('a'), {
            ingress: [{ peers: [{ namespaceSelector: ns('y') }], ports: [{ port: 81 }] }],
          }),
        ],
        probes: TCP80_81,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow y/* -> x/a 81/TCP'] },
      },
    ],
  },
  {
    name: 'named port: ingress on serve-81-tcp',
    steps: [
      {
        what: 'x pods accept anyone on serve-81-tcp',
        policies: () => [casePolicy('x/named', {}, { ingress: [{ ports: [{ port: 'serve-81-tcp' }] }] })],
        probes: TCP80_81,
        expect: { default: 'allow', rules: ['deny * -> x/* 80/TCP'] },
      },
    ],
  },
  {
    name: 'named port: UDP ingress on serve-81-udp',
    steps: [
      {
        what: 'x/a accepts anyone on serve-81-udp',
        policies: () => [
          casePolicy('x/named-udp', pod('a'), {
            ingress: [{ ports: [{ protocol: 'UDP', port: 'serve-81-udp' }] }],
          }),
        ],
        probes: ['80/UDP', '81/UDP'],
        expect: { default: 'allow', rules: ['deny * -> x/a 80/UDP'] },
      },
    ],
  },
  {
    name: 'named port: egress on serve-80-tcp',
    steps: [
      {
        what: 'x pods may reach anyone on serve-80-tcp only',
        policies: () => [
          casePolicy(
            'x/named-egress',
            {},
            { egress: [{ ports: [{ port: 'serve-80-tcp' }] }], types: ['Egress'] },
          ),
        ],
        probes: TCP80_81,
        expect: { default: 'allow', rules: ['deny x/* -> * 81/TCP'] },
      },
    ],
  },
  {
    name: 'endPort: ranges of ports',
    steps: [
      {
        what: 'x/a accepts 80-81/TCP, x/b accepts 81-82/TCP',
        policies: () => [
          casePolicy('x/range-a', pod('a'), { ingress: [{ ports: [{ port: 80, endPort: 81 }] }] }),
          casePolicy('x/range-b', pod('b'), {
            ingress: [{ ports: [{ protocol: 'TCP', port: 81, endPort: 82 }] }],
          }),
        ],
        probes: ['80/TCP', '81/TCP', '80/UDP'],
        expect: {
          default: 'allow',
          rules: ['deny * -> x/a 80/UDP', 'deny * -> x/b 80/UDP', 'deny * -> x/b 80/TCP'],
        },
      },
    ],
  },
  {
    name: 'ipBlock: egress to one pod address',
    steps: [
      {
        what: 'x/a may reach only y/b',
        policies: (ip) => [
          casePolicy('x/to-yb', pod('a'), {
            egress: [{ peers: [{ ipBlock: { cidr: hostCidr(ip('y/b')) } }] }],
            types: ['Egress'],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny x/a -> *', 'allow x/a -> y/b'] },
      },
    ],
  },
  {
    name: 'ipBlock with except: egress to all but one pod',
    steps: [
      {
        what: 'x/a may reach everything except x/b',
        policies: (ip) => [
          casePolicy('x/except-xb', pod('a'), {
            egress: [{ peers: [{ ipBlock: { cidr: everyCidr(ip('x/b')), except: [hostCidr(ip('x/b'))] } }] }],
            types: ['Egress'],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny x/a -> x/b'] },
      },
    ],
  },
  {
    name: 'ipBlock with except: ingress from all but two pods',
    steps: [
      {
        what: 'x/a accepts everything except y/c and z/c',
        policies: (ip) => [
          casePolicy('x/except-c', pod('a'), {
            ingress: [
              from({
                ipBlock: { cidr: everyCidr(ip('y/c')), except: [hostCidr(ip('y/c')), hostCidr(ip('z/c'))] },
              }),
            ],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny y/c -> x/a', 'deny z/c -> x/a'] },
      },
    ],
  },
  {
    name: 'egress to a pod of another namespace by PodSelector and NamespaceSelector',
    steps: [
      {
        what: 'x/a may reach y/a only',
        policies: () => [
          casePolicy('x/to-ya', pod('a'), {
            egress: [{ peers: [{ podSelector: pod('a'), namespaceSelector: ns('y') }] }],
            types: ['Egress'],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny x/a -> *', 'allow x/a -> y/a'] },
      },
    ],
  },
  {
    name: 'deny egress on the client even when the server allows',
    steps: [
      {
        what: 'y allows every ingress, x/a denies all egress',
        policies: () => [
          casePolicy('y/allow-all', {}, { ingress: [{}] }),
          casePolicy('x/deny-egress', pod('a'), { types: ['Egress'] }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny x/a -> *'] },
      },
    ],
  },
  {
    name: 'updates of pod labels',
    steps: [
      {
        what: 'x/a accepts pods of x labelled role=client (none yet)',
        policies: () => [
          casePolicy('x/clients', pod('a'), {
            ingress: [from({ podSelector: { matchLabels: { role: 'client' } } })],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a'] },
      },
      {
        what: 'x/b becomes a client',
        podLabels: { 'x/b': { pod: 'b', role: 'client' } },
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow x/b -> x/a'] },
      },
      {
        what: 'x/b stops being a client',
        podLabels: { 'x/b': { pod: 'b' } },
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a'] },
      },
    ],
  },
  {
    name: 'updates of namespace labels',
    steps: [
      {
        what: 'x/a accepts namespaces labelled team=blue (none yet)',
        policies: () => [
          casePolicy('x/blue', pod('a'), {
            ingress: [from({ namespaceSelector: { matchLabels: { team: 'blue' } } })],
          }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a'] },
      },
      {
        what: 'y joins team blue',
        namespaceLabels: { y: { ns: 'y', team: 'blue' } },
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow y/* -> x/a'] },
      },
    ],
  },
  {
    name: 'updates of a policy, then its deletion',
    steps: [
      {
        what: 'x/a accepts x/b',
        policies: () => [
          casePolicy('x/allow-client', pod('a'), { ingress: [from({ podSelector: pod('b') })] }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow x/b -> x/a'] },
      },
      {
        what: 'the policy now names x/c instead',
        policies: () => [
          casePolicy('x/allow-client', pod('a'), { ingress: [from({ podSelector: pod('c') })] }),
        ],
        probes: TCP80,
        expect: { default: 'allow', rules: ['deny * -> x/a', 'allow x/c -> x/a'] },
      },
      {
        what: 'the policy is deleted',
        deletePolicies: ['x/allow-client'],
        probes: TCP80,
        expect: { default: 'allow', rules: [] },
      },
    ],
  },
];

const RULE = /^(allow|deny) (\S+) -> (\S+)(?: (\d+\/(?:TCP|UDP|SCTP)))?$/;

function patternMatches(pattern: string, podKey: string): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('/*')) return podKey.startsWith(pattern.slice(0, -1));
  return pattern === podKey;
}

/** What a step states for one probe (never derived from the policies). */
export function expectedReachable(step: CaseStep, from: string, to: string, probe: ProbePort): boolean {
  let allowed = step.expect.default === 'allow';
  for (const rule of step.expect.rules) {
    const m = RULE.exec(rule);
    if (!m) throw new Error(`unreadable expectation "${rule}"`);
    const [, verdict, f, t, port] = m as unknown as [string, string, string, string, string?];
    if (patternMatches(f, from) && patternMatches(t, to) && (!port || port === probe)) {
      allowed = verdict === 'allow';
    }
  }
  return allowed;
}

/** The state after a step, and the changes a source would announce for it. */
export function applyCaseStep(
  state: PolicyState,
  step: CaseStep,
  ip: AddressOf,
): { state: PolicyState; changes: PolicyChange[] } {
  const namespaces = new Map(state.namespaces);
  const pods = new Map(state.pods);
  const policies = new Map(state.policies);
  const changes: PolicyChange[] = [];
  for (const p of step.policies?.(ip) ?? []) {
    const key = `${p.namespace}/${p.name}`;
    policies.set(key, p);
    changes.push({ kind: 'policy', key });
  }
  for (const key of step.deletePolicies ?? []) {
    policies.delete(key);
    changes.push({ kind: 'policy', key });
  }
  for (const [key, labels] of Object.entries(step.podLabels ?? {})) {
    pods.set(key, casePod(key, ip(key), labels));
    changes.push({ kind: 'pod', key });
  }
  for (const [name, labels] of Object.entries(step.namespaceLabels ?? {})) {
    namespaces.set(name, { name, labels });
    changes.push({ kind: 'namespace', name });
  }
  return { state: { namespaces, pods, policies }, changes };
}
