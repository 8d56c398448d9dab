// The compiler: from the source's namespaces, pods and policies and this node's attachments to what the
// node enforces (core/policy-dataplane.ts), by the meaning of networking.k8s.io/v1 NetworkPolicy. Pure:
// the same inputs give the same program. PolicyBook (policy-book.ts) keeps the same result up to date
// change by change; this whole compile is its reference.

import type { Cidr } from '../../lib/cidr';
import type { CompiledPolicy, PodPolicy } from '../policy-dataplane';
import { objectKey, type PolicyPod, type PolicyState } from '../policy-source';
import { type SetSpec, addressElements, blockElements, peerSelects, selectionKey } from './address-sets';
import { selectorMatches } from './label-selector';
import { resolveNamedPort } from './named-ports';
import {
  type Instantiation,
  type NamedPortNumbers,
  type PolicyTemplate,
  addEgressRules,
  addIngressRule,
  policyTemplate,
} from './policy-rules';
import { type CompileOptions, type LocalPod, LocalRanges, type PodView, viewPod } from './trusted-pods';

export type { CompileOptions, LocalPod } from './trusted-pods';

/** One attachment's program, and what its rules read. */
export interface PodBuild {
  /** Undefined: not isolated in either direction. */
  policy?: PodPolicy;
  sets: Map<string, SetSpec>;
  groups: Set<string>;
}

/** Whether a policy (of the pod's namespace) selects the pod. */
export function policySelects(t: PolicyTemplate, pod: PolicyPod): boolean {
  return t.namespace === pod.namespace && selectorMatches(t.podSelector, pod.labels);
}

/** The program of one attachment from the policies selecting its pod (sorted by key). */
export function buildPodPolicy(
  local: LocalPod,
  pod: PolicyPod,
  selecting: readonly PolicyTemplate[],
  numbers: NamedPortNumbers,
): PodBuild {
  const sets = new Map<string, SetSpec>();
  const groups = new Set<string>();
  const ingress: Instantiation | undefined = selecting.some((t) => t.ingress)
    ? { rules: [], sets, groups }
    : undefined;
  const egress: Instantiation | undefined = selecting.some((t) => t.egress)
    ? { rules: [], sets, groups }
    : undefined;
  for (const t of selecting) {
    if (ingress) for (const r of t.ingress ?? []) addIngressRule(r, pod, ingress);
    if (egress) for (const r of t.egress ?? []) addEgressRules(r, numbers, egress);
  }
  if (!ingress && !egress) return { sets, groups };
  const policy: PodPolicy = {
    key: local.key,
    pod: objectKey(pod.namespace, pod.name),
    hostIf: local.hostIf,
    ips: [...local.ips],
    ...(ingress ? { ingress: { rules: ingress.rules } } : {}),
    ...(egress ? { egress: { rules: egress.rules } } : {}),
    policies: selecting.map((t) => t.key),
  };
  return { policy, sets, groups };
}

/** Every pod's view: the source's pods and this node's, under the trust rule. */
export function viewAll(
  state: PolicyState,
  localPods: readonly LocalPod[],
  options: CompileOptions,
): { views: Map<string, PodView>; localsByPod: Map<string, LocalPod[]> } {
  const ranges = new LocalRanges(options.localRanges);
  const localAddresses = new Set(localPods.flatMap((l) => l.ips));
  const localsByPod = new Map<string, LocalPod[]>();
  for (const l of localPods) {
    const k = objectKey(l.pod.namespace, l.pod.name);
    localsByPod.set(k, [...(localsByPod.get(k) ?? []), l]);
  }
  const views = new Map<string, PodView>();
  for (const k of new Set([...state.pods.keys(), ...localsByPod.keys()])) {
    const v = viewPod(state.pods.get(k), localsByPod.get(k) ?? [], ranges, localAddresses);
    if (v) views.set(k, v);
  }
  return { views, localsByPod };
}

function setElements(spec: SetSpec, views: Map<string, PodView>, state: PolicyState): string[] {
  if (spec.kind === 'block') return blockElements(spec.cidr, spec.except);
  const lists: Array<readonly Cidr[]> = [];
  for (const v of views.values()) {
    if (!peerSelects(spec.peer, v.pod, state.namespaces.get(v.pod.namespace)?.labels)) continue;
    if (spec.kind === 'named' && resolveNamedPort(v.pod, spec.portName, spec.protocol) !== spec.port) {
      continue;
    }
    lists.push(v.prefixes);
  }
  return addressElements(lists);
}

export function compilePolicy(
  state: PolicyState,
  localPods: readonly LocalPod[],
  options: CompileOptions,
): CompiledPolicy {
  const { views } = viewAll(state, localPods, options);
  const templates = [...state.policies.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, p]) => policyTemplate(p, k));
  const memo = new Map<string, readonly number[]>();
  const numbers: NamedPortNumbers = (peer, port) => {
    const key = selectionKey(peer, port);
    let found = memo.get(key);
    if (!found) {
      const set = new Set<number>();
      for (const v of views.values()) {
        const labels = state.namespaces.get(v.pod.namespace)?.labels;
        if (!v.addresses.length || !peerSelects(peer, v.pod, labels)) continue;
        const n = resolveNamedPort(v.pod, port.name, port.protocol);
        if (n !== undefined) set.add(n);
      }
      found = [...set].sort((a, b) => a - b);
      memo.set(key, found);
    }
    return found;
  };
  const pods = new Map<string, PodPolicy>();
  const specs = new Map<string, SetSpec>();
  for (const local of [...localPods].sort((a, b) => (a.key < b.key ? -1 : 1))) {
    const view = views.get(objectKey(local.pod.namespace, local.pod.name));
    if (!view) continue;
    const build = buildPodPolicy(
      local,
      view.pod,
      templates.filter((t) => policySelects(t, view.pod)),
      numbers,
    );
    if (!build.policy) continue;
    pods.set(local.key, build.policy);
    for (const [name, spec] of build.sets) specs.set(name, spec);
  }
  const sets = new Map<string, readonly string[]>();
  for (const name of [...specs.keys()].sort()) sets.set(name, setElements(specs.get(name)!, views, state));
  return { sets, pods };
}
