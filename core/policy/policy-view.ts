import type {
  CompiledPolicy,
  CompiledRule,
  PodPolicy,
  PolicyDataplane,
  PolicyDenials,
  PortMatch,
} from '../policy-dataplane';
import type { PolicySourceStatus } from '../policy-source';
import type { PolicyFigures } from '../metrics';
import type { PodPolicyView, PolicyRuleView, PolicyStatus } from '../workload-service';

// What NetworkPolicy shows of itself: Status.policy and the policy gauges, from the source's status and
// each enforcing backend's program and loop.

/** One backend as the view reads it. */
export interface EnforcerView {
  backend: string;
  dataplane?: PolicyDataplane;
  program?: CompiledPolicy;
  failure?: string;
  lastAppliedAt?: Date;
}

function rulesOf(program: CompiledPolicy): number {
  let n = 0;
  for (const p of program.pods.values()) n += (p.ingress?.rules.length ?? 0) + (p.egress?.rules.length ?? 0);
  return n;
}

/** The denied packets of every enforcing backend, summed per direction. */
async function deniedOf(enforcers: readonly EnforcerView[]): Promise<{ ingress: number; egress: number }> {
  const sum = { ingress: 0, egress: 0 };
  for (const e of enforcers) {
    if (!e.dataplane || !e.program) continue;
    const denied = await e.dataplane.denied().catch(() => new Map());
    for (const d of denied.values()) {
      sum.ingress += d.ingress;
      sum.egress += d.egress;
    }
  }
  return sum;
}

export async function policyFigures(
  source: PolicySourceStatus,
  enforcers: readonly EnforcerView[],
  opts: { counters: boolean } = { counters: true },
): Promise<PolicyFigures> {
  let pods = 0;
  let rules = 0;
  let sets = 0;
  for (const e of enforcers) {
    if (!e.program) continue;
    pods += e.program.pods.size;
    rules += rulesOf(e.program);
    sets += e.program.sets.size;
  }
  const denied = opts.counters ? await deniedOf(enforcers) : { ingress: 0, egress: 0 };
  return { objects: { policies: source.policies, pods, rules, sets }, denied };
}

export async function policyStatus(
  source: PolicySourceStatus,
  synced: boolean,
  enforcers: readonly EnforcerView[],
  unenforced: readonly string[],
  opts: { counters: boolean },
): Promise<PolicyStatus> {
  const figures = await policyFigures(source, enforcers, opts);
  const reasons = [...source.reasons];
  if (!synced)
    reasons.unshift(
      'no full list of namespaces, pods and policies yet: pods are not attached until there is',
    );
  for (const e of enforcers) {
    if (e.failure) reasons.push(`backend ${e.backend}: NetworkPolicy not applied: ${e.failure}`);
    // Not a reason to be unready: the periodic recheck still puts drift back, only later.
    const deaf = e.dataplane?.monitorDown?.();
    if (deaf) reasons.push(`backend ${e.backend}: ${deaf}`);
  }
  return {
    ready: synced && enforcers.every((e) => !e.failure),
    reasons,
    namespaces: source.namespaces,
    pods: source.pods,
    policies: source.policies,
    podsIsolated: figures.objects.pods,
    rules: figures.objects.rules,
    sets: figures.objects.sets,
    unenforced: [...unenforced].sort(),
    enforcers: enforcers
      .filter((e) => e.dataplane)
      .map((e) => ({
        backend: e.backend,
        where: e.dataplane?.where ?? 'host',
        failure: e.failure ?? '',
        lastApply: e.lastAppliedAt?.toISOString() ?? '',
      })),
    denied: figures.denied,
  };
}

function portText(p: PortMatch): string {
  if (p.port === undefined) return p.protocol;
  return `${p.protocol}/${p.port}${p.endPort !== undefined && p.endPort !== p.port ? `-${p.endPort}` : ''}`;
}

function ruleView(r: CompiledRule): PolicyRuleView {
  return {
    sets: [...(r.sets ?? [])],
    anyPeer: r.sets === undefined,
    ports: (r.ports ?? []).map(portText),
    anyPort: r.ports === undefined,
  };
}

/** One pod's program as `workloadnet policy` shows it, with the sets its rules name. */
export function podPolicyView(
  pod: PodPolicy,
  program: CompiledPolicy,
  at: { backend: string; where: string; at?: Date; denied?: PolicyDenials },
): PodPolicyView {
  const rules = [...(pod.ingress?.rules ?? []), ...(pod.egress?.rules ?? [])];
  const names = [...new Set(rules.flatMap((r) => r.sets ?? []))].sort();
  return {
    pod: pod.pod,
    attachment: pod.key,
    backend: at.backend,
    where: at.where,
    hostInterface: pod.hostIf,
    ips: [...pod.ips],
    policies: [...pod.policies],
    ingressIsolated: pod.ingress !== undefined,
    egressIsolated: pod.egress !== undefined,
    ingress: (pod.ingress?.rules ?? []).map(ruleView),
    egress: (pod.egress?.rules ?? []).map(ruleView),
    sets: names.map((name) => ({ name, prefixes: [...(program.sets.get(name) ?? [])] })),
    appliedAt: at.at?.toISOString() ?? '',
    deniedIngress: at.denied?.ingress ?? 0,
    deniedEgress: at.denied?.egress ?? 0,
  };
}
