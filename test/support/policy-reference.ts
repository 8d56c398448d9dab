// A reference evaluator of Kubernetes NetworkPolicy (networking.k8s.io/v1), written from the API's
// documentation and independent of core/policy: given the whole state, may traffic go from one
// endpoint to another on a protocol and port? It walks pods and policies directly (no sets, no
// compilation), slowly and plainly, so that the compiler can be checked against it.

import { parseAddress } from '../../lib/cidr';
import type {
  LabelSelector,
  NetworkPolicy,
  PolicyPeer,
  PolicyPod,
  PolicyPort,
  PolicyProtocol,
  PolicyState,
} from '../../core/policy-source';

/** A pod (`namespace/name`, with the address the traffic carries) or an address outside any pod. */
export interface Endpoint {
  pod?: string;
  ip: string;
}

type Labels = Readonly<Record<string, string>>;

function selects(sel: LabelSelector, labels: Labels): boolean {
  const ok = Object.entries(sel.matchLabels ?? {}).every(([k, v]) => labels[k] === v && k in labels);
  return (
    ok &&
    (sel.matchExpressions ?? []).every((e) => {
      const present = Object.prototype.hasOwnProperty.call(labels, e.key);
      if (e.operator === 'Exists') return present;
      if (e.operator === 'DoesNotExist') return !present;
      const inValues = present && (e.values ?? []).includes(labels[e.key] as string);
      return e.operator === 'In' ? inValues : !inValues;
    })
  );
}

/** Whether an address lies in a CIDR (false across families). */
export function inCidr(ip: string, cidr: string): boolean {
  const [net, len] = cidr.split('/') as [string, string];
  const a = parseAddress(ip);
  const n = parseAddress(net);
  if (a.family !== n.family) return false;
  const shift = BigInt((a.family === 4 ? 32 : 128) - Number(len));
  return a.value >> shift === n.value >> shift;
}

function podOf(state: PolicyState, e: Endpoint): PolicyPod | undefined {
  return e.pod === undefined ? undefined : state.pods.get(e.pod);
}

/** Whether a rule's peer admits the endpoint at the other end (the policy lives in `namespace`). */
function peerAdmits(state: PolicyState, peer: PolicyPeer, namespace: string, other: Endpoint): boolean {
  if (peer.ipBlock) {
    return (
      inCidr(other.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((x) => inCidr(other.ip, x))
    );
  }
  const pod = podOf(state, other);
  if (!pod || pod.hostNetwork) return false;
  if (peer.namespaceSelector) {
    const nsLabels = state.namespaces.get(pod.namespace)?.labels ?? {};
    if (!selects(peer.namespaceSelector, nsLabels)) return false;
  } else if (pod.namespace !== namespace) return false;
  return selects(peer.podSelector ?? {}, pod.labels);
}

/** Whether a rule's port admits the traffic; a named port is looked up on the destination pod. */
function portAdmits(p: PolicyPort, dest: PolicyPod | undefined, protocol: PolicyProtocol, port: number) {
  if ((p.protocol ?? 'TCP') !== protocol) return false;
  if (p.port === undefined) return true;
  if (typeof p.port === 'string') {
    const named = dest?.namedPorts.find((n) => n.name === p.port && n.protocol === protocol);
    return named !== undefined && named.port === port;
  }
  return port >= p.port && port <= (p.endPort ?? p.port);
}

function selectingPolicies(state: PolicyState, pod: PolicyPod, type: 'Ingress' | 'Egress') {
  const out: NetworkPolicy[] = [];
  for (const p of state.policies.values()) {
    if (p.namespace === pod.namespace && p.policyTypes.includes(type) && selects(p.podSelector, pod.labels)) {
      out.push(p);
    }
  }
  return out;
}

function directionAllows(
  state: PolicyState,
  subject: Endpoint,
  other: Endpoint,
  dest: Endpoint,
  type: 'Ingress' | 'Egress',
  protocol: PolicyProtocol,
  port: number,
): boolean {
  const pod = podOf(state, subject);
  if (!pod) return true;
  const policies = selectingPolicies(state, pod, type);
  if (policies.length === 0) return true; // not isolated in this direction
  const destPod = podOf(state, dest);
  return policies.some((p) =>
    (type === 'Ingress' ? p.ingress : p.egress).some(
      (rule) =>
        (!rule.peers?.length || rule.peers.some((peer) => peerAdmits(state, peer, p.namespace, other))) &&
        (!rule.ports?.length || rule.ports.some((pp) => portAdmits(pp, destPod, protocol, port))),
    ),
  );
}

/**
 * One end's policies allow it: for Ingress the destination's (the source is the peer), for Egress the
 * source's (the destination is the peer).
 */
export function directionAllowed(
  state: PolicyState,
  type: 'Ingress' | 'Egress',
  from: Endpoint,
  to: Endpoint,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  const [subject, other] = type === 'Ingress' ? [to, from] : [from, to];
  return directionAllows(state, subject, other, to, type, protocol, port);
}

/** Both ends allow it. */
export function referenceAllows(
  state: PolicyState,
  from: Endpoint,
  to: Endpoint,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  return (
    directionAllowed(state, 'Egress', from, to, protocol, port) &&
    directionAllowed(state, 'Ingress', from, to, protocol, port)
  );
}
