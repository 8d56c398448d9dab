import type { NetworkPolicy, PolicyPeer, PolicyRule } from '../../core/policy-source';
import {
  CASE_NAMESPACES,
  CASE_POD_KEYS,
  expectedReachable,
  type CaseStep,
  type PolicyCase,
  type ProbePort,
} from './policy-cases';
import { mismatches, type PolicyNode, type ProbeCell } from './policy-node';
import type { StandInKubeApiServer } from './standin-kube-apiserver';
import type { ProbeProtocol } from './netns-prober';
import { CONTAINER_PORTS } from './policy-node';

// The upstream NetworkPolicy cases (policy-cases.ts) run against a real node: each step's changes
// written to the stand-in API server as the Kubernetes objects a user would apply, then every pair of
// pods probed on the step's ports, and the outcomes compared with the step's stated expectation.

/** A rule of the model as the API writes it: `from` for ingress, `to` for egress. */
function apiRule(rule: PolicyRule, side: 'from' | 'to'): Record<string, unknown> {
  const peers = (rule.peers ?? []).map((p: PolicyPeer) => ({ ...p }));
  return {
    ...(rule.ports ? { ports: rule.ports.map((p) => ({ ...p })) } : {}),
    ...(rule.peers ? { [side]: peers } : {}),
  };
}

/** The NetworkPolicy spec of a model policy, as `kubectl apply` would send it. */
export function apiSpec(p: NetworkPolicy): Record<string, unknown> {
  return {
    podSelector: p.podSelector,
    policyTypes: p.policyTypes,
    ...(p.ingress.length || p.policyTypes.includes('Ingress')
      ? { ingress: p.ingress.map((r) => apiRule(r, 'from')) }
      : {}),
    ...(p.egress.length ? { egress: p.egress.map((r) => apiRule(r, 'to')) } : {}),
  };
}

export class PolicyCaseRunner {
  /** Policies this case created, to delete after it. */
  private readonly created = new Set<string>();
  private readonly labelled = new Set<string>();
  private readonly nsLabelled = new Set<string>();

  constructor(
    private readonly node: PolicyNode,
    private readonly api: StandInKubeApiServer,
    private readonly nodeName: string,
  ) {}

  private ip = (pod: string): string => this.node.pod(pod).ip;

  /** Writes a step's changes to the API server. */
  apply(step: CaseStep): void {
    for (const p of step.policies?.(this.ip) ?? []) {
      this.api.putNetworkPolicy(p.namespace, p.name, apiSpec(p));
      this.created.add(`${p.namespace}/${p.name}`);
    }
    for (const key of step.deletePolicies ?? []) {
      const [ns = '', name = ''] = key.split('/');
      this.api.deleteNetworkPolicy(ns, name);
      this.created.delete(key);
    }
    for (const [key, labels] of Object.entries(step.podLabels ?? {})) {
      this.putPod(key, labels);
      this.labelled.add(key);
    }
    for (const [ns, labels] of Object.entries(step.namespaceLabels ?? {})) {
      this.api.putNamespace(ns, labels);
      this.nsLabelled.add(ns);
    }
  }

  /** Every probe of the step that did not come out as the step says. */
  async check(step: CaseStep): Promise<string[]> {
    const cells: ProbeCell[] = [];
    for (const from of CASE_POD_KEYS)
      for (const to of CASE_POD_KEYS) {
        if (from === to) continue;
        for (const probe of step.probes) {
          const [port, protocol] = probe.split('/') as [string, ProbeProtocol];
          cells.push({ from, to, port: Number(port), protocol });
        }
      }
    const expected = (c: ProbeCell): boolean =>
      expectedReachable(step, c.from, c.to, `${c.port}/${c.protocol}` as ProbePort);
    return mismatches(this.node, cells, expected);
  }

  /** Runs a whole case; the mismatches of each step, prefixed with the step. */
  async run(c: PolicyCase): Promise<string[]> {
    const wrong: string[] = [];
    try {
      for (const step of c.steps) {
        this.apply(step);
        for (const w of await this.check(step)) wrong.push(`${c.name}: ${step.what}: ${w}`);
      }
    } finally {
      this.reset();
    }
    return wrong;
  }

  /** Back to the cases' starting point: no policy, every label as it was. */
  reset(): void {
    for (const key of this.created) {
      const [ns = '', name = ''] = key.split('/');
      this.api.deleteNetworkPolicy(ns, name);
    }
    this.created.clear();
    for (const key of this.labelled) this.putPod(key, { pod: key.split('/')[1] ?? '' });
    this.labelled.clear();
    for (const ns of this.nsLabelled) this.api.putNamespace(ns, { ns });
    this.nsLabelled.clear();
  }

  private putPod(key: string, labels: Record<string, string>): void {
    const [namespace = '', name = ''] = key.split('/');
    this.api.putPod({
      namespace,
      name,
      uid: `uid-${namespace}-${name}`,
      labels,
      ips: [this.ip(key)],
      ports: CONTAINER_PORTS,
      nodeName: this.nodeName,
    });
  }
}

/** The namespaces and pods the cases start from, on `node`. */
export async function addCasePods(node: PolicyNode, api: StandInKubeApiServer): Promise<void> {
  for (const ns of CASE_NAMESPACES) api.putNamespace(ns, { ns });
  for (const key of CASE_POD_KEYS) {
    const [ns = '', name = ''] = key.split('/');
    await node.addPod(ns, name, { pod: name });
  }
}
