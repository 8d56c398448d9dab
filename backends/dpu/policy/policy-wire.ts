import type {
  CompiledPolicy,
  CompiledRule,
  DirectionPolicy,
  PodPolicy,
} from '../../../core/policy-dataplane';
import {
  PolicyProtocol,
  type PolicyDirection,
  type PolicyObject,
  type PolicyRule,
} from '../../../proto/gen/workloadnet/dpu/v1/dpu';

// The compiled program as one agent's policy objects (protocol version 4): each of its ports' rules as
// a PortPolicy, and the address sets those rules name, each once, as AddressSets. The two name spaces
// share the object kind, so their names carry what they are: "set/<set>" and "port/<port>".

/** A policy object without its generation: what an agent should hold under one name. */
export type PolicyBody = Omit<PolicyObject, 'generation'>;

export const SET_PREFIX = 'set/';
export const PORT_PREFIX = 'port/';

const PROTOCOLS = {
  TCP: PolicyProtocol.POLICY_PROTOCOL_TCP,
  UDP: PolicyProtocol.POLICY_PROTOCOL_UDP,
  SCTP: PolicyProtocol.POLICY_PROTOCOL_SCTP,
} as const;

function wireRule(rule: CompiledRule): PolicyRule {
  return {
    anyAddress: rule.sets === undefined,
    sets: [...(rule.sets ?? [])],
    anyPort: rule.ports === undefined,
    ports: (rule.ports ?? []).map((p) => ({
      protocol: PROTOCOLS[p.protocol],
      port: p.port ?? 0,
      endPort: p.endPort ?? 0,
    })),
  };
}

function wireDirection(d: DirectionPolicy | undefined): PolicyDirection | undefined {
  return d ? { rules: d.rules.map(wireRule) } : undefined;
}

/** The PortPolicy of one pod: its port is named by the attachment key, as the port itself is. */
export function portPolicyBody(pod: PodPolicy): PolicyBody {
  return {
    name: PORT_PREFIX + pod.key,
    portPolicy: { port: pod.key, ingress: wireDirection(pod.ingress), egress: wireDirection(pod.egress) },
  };
}

/** The sets `pods` name, each once. */
export function namedSets(pods: Iterable<PodPolicy>): Set<string> {
  const out = new Set<string>();
  for (const pod of pods)
    for (const d of [pod.ingress, pod.egress])
      for (const rule of d?.rules ?? []) for (const s of rule.sets ?? []) out.add(s);
  return out;
}

/**
 * What an agent holding `pods` should hold: their port policies and the sets they name. Ordered sets
 * first, so that a snapshot (and a change) lists a set before any port policy naming it.
 */
export function agentObjects(program: CompiledPolicy, pods: readonly PodPolicy[]): Map<string, PolicyBody> {
  const out = new Map<string, PolicyBody>();
  for (const name of [...namedSets(pods)].sort())
    out.set(SET_PREFIX + name, {
      name: SET_PREFIX + name,
      addressSet: { prefixes: [...(program.sets.get(name) ?? [])] },
    });
  for (const pod of pods) out.set(PORT_PREFIX + pod.key, portPolicyBody(pod));
  return out;
}
