// Address sets, named for what selects them: a pod/namespace selector pair (with the policy's namespace
// when no namespaceSelector widens it), an ipBlock, or, for an egress named port, the selector pair with
// the port's name, protocol and the number it resolves to. A label change or a new pod elsewhere edits
// a set's elements; rules keep naming the same sets. Identical selectors in several policies share one.

import { createHash } from 'node:crypto';
import type { LabelSelector, PolicyPeer, PolicyPod, PolicyProtocol } from '../policy-source';
import type { Cidr } from '../../lib/cidr';
import { ipBlockPrefixes, mergePrefixes } from './ip-block';
import { canonicalSelector, selectorMatches } from './label-selector';

/** Which pods a peer selects: `namespace` only when no namespaceSelector is given. */
export interface SelectorPeer {
  podSelector: LabelSelector;
  namespaceSelector?: LabelSelector;
  namespace?: string;
}

/** Every pod of every namespace: the destinations of an egress rule with a named port and no peers. */
export const EVERY_POD: SelectorPeer = { podSelector: {}, namespaceSelector: {} };

export type SetSpec =
  | { kind: 'pods'; peer: SelectorPeer }
  | { kind: 'block'; cidr: string; except: readonly string[] }
  | { kind: 'named'; peer: SelectorPeer; portName: string; protocol: PolicyProtocol; port: number };

/** The selector pair of a pod/namespace peer of a policy in `namespace`. */
export function selectorPeer(peer: PolicyPeer, namespace: string): SelectorPeer {
  const podSelector = peer.podSelector ?? {};
  return peer.namespaceSelector
    ? { podSelector, namespaceSelector: peer.namespaceSelector }
    : { podSelector, namespace };
}

const peerKeys = new WeakMap<SelectorPeer, string>();

export function peerKey(peer: SelectorPeer): string {
  const known = peerKeys.get(peer);
  if (known !== undefined) return known;
  const ns = peer.namespaceSelector
    ? `nss=${canonicalSelector(peer.namespaceSelector)}`
    : `ns=${peer.namespace ?? ''}`;
  const key = `${ns} ps=${canonicalSelector(peer.podSelector)}`;
  peerKeys.set(peer, key);
  return key;
}

/** A namespace the source does not hold counts as one without labels. */
export function peerSelects(
  peer: SelectorPeer,
  pod: PolicyPod,
  namespaceLabels: Readonly<Record<string, string>> | undefined,
): boolean {
  if (peer.namespaceSelector) {
    if (!selectorMatches(peer.namespaceSelector, namespaceLabels ?? {})) return false;
  } else if (pod.namespace !== peer.namespace) {
    return false;
  }
  return selectorMatches(peer.podSelector, pod.labels);
}

/** The key of what a set's members are drawn from: a selector pair, and for egress a port name. */
export function selectionKey(peer: SelectorPeer, named?: { name: string; protocol: PolicyProtocol }) {
  return named ? `${peerKey(peer)} port=${named.protocol}/${named.name}` : peerKey(peer);
}

export function setSpecKey(spec: SetSpec): string {
  switch (spec.kind) {
    case 'pods':
      return `pods ${peerKey(spec.peer)}`;
    case 'block':
      return `block ${spec.cidr} except ${[...spec.except].sort().join(',')}`;
    case 'named':
      return `named ${selectionKey(spec.peer, { name: spec.portName, protocol: spec.protocol })}=${spec.port}`;
  }
}

const PREFIX: Record<SetSpec['kind'], string> = { pods: 'p', block: 'b', named: 'n' };

/** `[a-z0-9_]`, 21 characters: a kind letter and 80 bits of a hash of what selects the set. */
export function setName(spec: SetSpec): string {
  const hash = createHash('sha256').update(setSpecKey(spec)).digest('hex').slice(0, 20);
  return `${PREFIX[spec.kind]}${hash}`;
}

/** An ipBlock set's elements: they depend on nothing but the block. */
export function blockElements(cidr: string, except: readonly string[] = []): string[] {
  return mergePrefixes(ipBlockPrefixes(cidr, except));
}

/** A pod set's elements from its members' addresses (as prefixes). */
export function addressElements(members: Iterable<readonly Cidr[]>): string[] {
  const prefixes: Cidr[] = [];
  for (const list of members) prefixes.push(...list);
  return mergePrefixes(prefixes);
}
