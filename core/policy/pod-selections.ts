// The pods each selector pair selects, kept up to date pod by pod, so that a label change or a new pod
// elsewhere costs the selectors of its namespace (and the namespace-wide ones), not a recompile. A
// selection for an egress named port also knows the number each member's port resolves to.

import type { Cidr } from '../../lib/cidr';
import type { PolicyNamespace } from '../policy-source';
import { type SelectorPeer, type SetSpec, addressElements, peerSelects, selectionKey } from './address-sets';
import { resolveNamedPort } from './named-ports';
import type { NamedPortRef } from './policy-rules';
import type { PodView } from './trusted-pods';

export interface Selection {
  key: string;
  peer: SelectorPeer;
  named?: NamedPortRef;
  /** Pod key → the number its named port resolves to (0 without a named port). */
  members: Map<string, number>;
  /** The numbers of `members`, sorted: what an egress rule's shape was built from. */
  numbers: number[];
  /** Names of the sets drawn from it that rules name now. */
  sets: Set<string>;
  /** Attachments whose rules read `numbers`. */
  readers: Set<string>;
}

export class PodSelections {
  private readonly all = new Map<string, Selection>();
  private readonly byNamespace = new Map<string, Set<Selection>>();
  private readonly wide = new Set<Selection>();
  /** Selections whose members or members' addresses changed since the last take. */
  private dirty = new Set<Selection>();

  constructor(
    private readonly views: ReadonlyMap<string, PodView>,
    private readonly namespaces: () => ReadonlyMap<string, PolicyNamespace>,
  ) {}

  get(key: string): Selection | undefined {
    return this.all.get(key);
  }

  private memberValue(sel: Selection, view: PodView | undefined): number | undefined {
    if (!view || view.addresses.length === 0) return undefined;
    const labels = this.namespaces().get(view.pod.namespace)?.labels;
    if (!peerSelects(sel.peer, view.pod, labels)) return undefined;
    if (!sel.named) return 0;
    return resolveNamedPort(view.pod, sel.named.name, sel.named.protocol);
  }

  /** The selection of `peer` (and named port), made and filled from every pod when new. */
  ensure(peer: SelectorPeer, named?: NamedPortRef): Selection {
    const key = selectionKey(peer, named);
    const found = this.all.get(key);
    if (found) return found;
    const sel: Selection = {
      key,
      peer,
      named,
      members: new Map(),
      numbers: [],
      sets: new Set(),
      readers: new Set(),
    };
    for (const [podKey, view] of this.views) {
      const v = this.memberValue(sel, view);
      if (v !== undefined) sel.members.set(podKey, v);
    }
    sel.numbers = numbersOf(sel);
    this.all.set(key, sel);
    if (peer.namespaceSelector) this.wide.add(sel);
    else addTo(this.byNamespace, peer.namespace ?? '', sel);
    return sel;
  }

  /** Drops a selection no rule reads any more. */
  releaseIfUnused(sel: Selection): void {
    if (sel.sets.size || sel.readers.size) return;
    this.all.delete(sel.key);
    this.wide.delete(sel);
    this.byNamespace.get(sel.peer.namespace ?? '')?.delete(sel);
    this.dirty.delete(sel);
  }

  private recheck(sel: Selection, podKey: string, hadAddresses: boolean): void {
    const before = sel.members.get(podKey);
    const after = this.memberValue(sel, this.views.get(podKey));
    if (after === undefined) sel.members.delete(podKey);
    else sel.members.set(podKey, after);
    if (before !== after || (after !== undefined && hadAddresses)) this.dirty.add(sel);
  }

  /** After a pod's view changed (`namespace`: its namespace before and after). */
  podChanged(podKey: string, namespaces: readonly string[], addressesChanged: boolean): void {
    const candidates = new Set<Selection>(this.wide);
    for (const ns of namespaces) for (const s of this.byNamespace.get(ns) ?? []) candidates.add(s);
    for (const sel of candidates) this.recheck(sel, podKey, addressesChanged);
  }

  /** After a namespace's labels changed: only namespace-wide selections can care. */
  namespaceChanged(podKeys: Iterable<string>): void {
    const keys = [...podKeys];
    for (const sel of this.wide) for (const k of keys) this.recheck(sel, k, false);
  }

  /** The selections changed since the last call; their `numbers` are brought up to date. */
  takeDirty(): Array<{ sel: Selection; numbersChanged: boolean }> {
    const out = [...this.dirty].map((sel) => {
      const numbers = numbersOf(sel);
      const numbersChanged = numbers.join() !== sel.numbers.join();
      sel.numbers = numbers;
      return { sel, numbersChanged };
    });
    this.dirty = new Set();
    return out;
  }

  /** A pod or named set's elements, from its selection's members. */
  elements(spec: Exclude<SetSpec, { kind: 'block' }>): string[] {
    const named = spec.kind === 'named' ? { name: spec.portName, protocol: spec.protocol } : undefined;
    const sel = this.all.get(selectionKey(spec.peer, named));
    if (!sel) return [];
    const lists: Array<readonly Cidr[]> = [];
    for (const [podKey, n] of sel.members) {
      if (spec.kind === 'named' && n !== spec.port) continue;
      lists.push(this.views.get(podKey)?.prefixes ?? []);
    }
    return addressElements(lists);
  }
}

function numbersOf(sel: Selection): number[] {
  if (!sel.named) return [];
  return [...new Set(sel.members.values())].sort((a, b) => a - b);
}

export function addTo<K, V>(map: Map<K, Set<V>>, key: K, value: V): void {
  let set = map.get(key);
  if (!set) map.set(key, (set = new Set()));
  set.add(value);
}
