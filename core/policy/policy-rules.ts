// One policy's rules, prepared once (their peers as named sets, their numeric ports) and completed per
// pod: a named port of an ingress rule resolves on the pod itself, one of an egress rule on each peer
// pod, so an egress rule with named ports becomes one rule per resolved number, naming the sets of the
// peers whose port resolves to it.

import type { CompiledRule, PortMatch } from '../policy-dataplane';
import type { LabelSelector, NetworkPolicy, PolicyPod, PolicyProtocol, PolicyRule } from '../policy-source';
import {
  EVERY_POD,
  type SelectorPeer,
  type SetSpec,
  selectionKey,
  selectorPeer,
  setName,
} from './address-sets';
import { resolveNamedPort } from './named-ports';

export interface PeerRef {
  set: string;
  spec: SetSpec;
}

export interface NamedPortRef {
  name: string;
  protocol: PolicyProtocol;
}

export interface RuleTemplate {
  /** Undefined: every peer. */
  peers?: PeerRef[];
  /** Undefined: every port (then `named` is empty). */
  ports?: PortMatch[];
  named: NamedPortRef[];
}

export interface PolicyTemplate {
  key: string;
  namespace: string;
  podSelector: LabelSelector;
  /** Undefined when the policy does not isolate that direction. */
  ingress?: RuleTemplate[];
  egress?: RuleTemplate[];
}

/** The numbers a named port resolves to among the pods a peer selects (with addresses), sorted. */
export type NamedPortNumbers = (peer: SelectorPeer, port: NamedPortRef) => readonly number[];

/** A pod's rules from its policies, with the sets they name and the named-port selections they read. */
export interface Instantiation {
  rules: CompiledRule[];
  sets: Map<string, SetSpec>;
  /** selectionKey()s of the egress named ports read (their numbers shape the rules). */
  groups: Set<string>;
}

function ruleTemplate(rule: PolicyRule, namespace: string): RuleTemplate {
  const peers = rule.peers?.length
    ? rule.peers.map((peer): PeerRef => {
        const spec: SetSpec = peer.ipBlock
          ? { kind: 'block', cidr: peer.ipBlock.cidr, except: peer.ipBlock.except ?? [] }
          : { kind: 'pods', peer: selectorPeer(peer, namespace) };
        return { set: setName(spec), spec };
      })
    : undefined;
  if (!rule.ports?.length) return { peers, named: [] };
  const ports: PortMatch[] = [];
  const named: NamedPortRef[] = [];
  for (const p of rule.ports) {
    const protocol = p.protocol ?? 'TCP';
    if (typeof p.port === 'string') named.push({ name: p.port, protocol });
    else if (p.port === undefined) ports.push({ protocol });
    else if (p.endPort !== undefined) ports.push({ protocol, port: p.port, endPort: p.endPort });
    else ports.push({ protocol, port: p.port });
  }
  return { peers, ports, named };
}

export function policyTemplate(policy: NetworkPolicy, key: string): PolicyTemplate {
  const types = new Set(policy.policyTypes);
  return {
    key,
    namespace: policy.namespace,
    podSelector: policy.podSelector,
    ingress: types.has('Ingress') ? policy.ingress.map((r) => ruleTemplate(r, policy.namespace)) : undefined,
    egress: types.has('Egress') ? policy.egress.map((r) => ruleTemplate(r, policy.namespace)) : undefined,
  };
}

function peerSets(t: RuleTemplate, out: Instantiation): string[] | undefined {
  if (!t.peers) return undefined;
  for (const p of t.peers) out.sets.set(p.set, p.spec);
  return [...new Set(t.peers.map((p) => p.set))];
}

/** A rule without the keys it leaves open (absent sets: any address; absent ports: any port). */
function rule(sets: string[] | undefined, ports: PortMatch[] | undefined): CompiledRule {
  return { ...(sets ? { sets } : {}), ...(ports ? { ports } : {}) };
}

/** An ingress rule for `pod`: its named ports resolve on the pod itself. */
export function addIngressRule(t: RuleTemplate, pod: PolicyPod, out: Instantiation): void {
  let ports = t.ports;
  if (ports && t.named.length) {
    ports = [...ports];
    for (const n of t.named) {
      const port = resolveNamedPort(pod, n.name, n.protocol);
      if (port !== undefined) ports.push({ protocol: n.protocol, port });
    }
  }
  if (ports && ports.length === 0) return; // no port it names exists here: the rule allows nothing
  out.rules.push(rule(peerSets(t, out), ports));
}

/** An egress rule: its numeric ports as one rule, its named ports as one rule per resolved number. */
export function addEgressRules(t: RuleTemplate, numbers: NamedPortNumbers, out: Instantiation): void {
  if (!t.ports || t.ports.length) {
    out.rules.push(rule(peerSets(t, out), t.ports));
  }
  if (!t.named.length) return;
  const byPort = new Map<string, { match: PortMatch; sets: Set<string> }>();
  // An ipBlock peer has no pod to resolve a name on: a named port matches nothing there.
  const selectors = t.peers
    ? t.peers.flatMap((p) => (p.spec.kind === 'pods' ? [p.spec.peer] : []))
    : [EVERY_POD];
  for (const n of t.named) {
    for (const peer of selectors) {
      out.groups.add(selectionKey(peer, n));
      for (const port of numbers(peer, n)) {
        const spec: SetSpec = { kind: 'named', peer, portName: n.name, protocol: n.protocol, port };
        const name = setName(spec);
        out.sets.set(name, spec);
        const k = `${n.protocol}/${port}`;
        const entry = byPort.get(k) ?? { match: { protocol: n.protocol, port }, sets: new Set() };
        entry.sets.add(name);
        byPort.set(k, entry);
      }
    }
  }
  const order = [...byPort.values()].sort(
    (a, b) => a.match.protocol.localeCompare(b.match.protocol) || (a.match.port ?? 0) - (b.match.port ?? 0),
  );
  for (const e of order) out.rules.push({ sets: [...e.sets].sort(), ports: [e.match] });
}
