// The compiled program kept up to date change by change: a source change (a pod, a namespace, a
// policy) or an attachment added or removed costs the selectors and pods it can reach, not a compile
// of everything. Policies are indexed by namespace, selections by namespace (namespace-wide ones
// apart), and each attachment remembers the policies selecting it and the sets its rules name. Its
// result always equals compilePolicy() of the same inputs (the property test holds it to that).

import type { CompiledPolicy, PodPolicy, PolicyTouched } from '../policy-dataplane';
import { type PolicyChange, type PolicyState, objectKey } from '../policy-source';
import { type SetSpec, blockElements } from './address-sets';
import { type PodSelections as Selections, PodSelections, addTo } from './pod-selections';
import { type PodBuild, buildPodPolicy, policySelects } from './policy-compiler';
import { type NamedPortNumbers, type PolicyTemplate, policyTemplate } from './policy-rules';
import { type CompileOptions, type LocalPod, LocalRanges, type PodView, viewPod } from './trusted-pods';

interface SetEntry {
  spec: SetSpec;
  refs: number;
}

export class PolicyBook {
  private state: PolicyState;
  private ranges: LocalRanges;
  private rangeTexts: string;
  private readonly locals = new Map<string, LocalPod>();
  private readonly localsByPod = new Map<string, Map<string, LocalPod>>();
  private readonly localAddresses = new Map<string, number>();
  private views = new Map<string, PodView>();
  private podsByNamespace = new Map<string, Set<string>>();
  private podsByAddress = new Map<string, Set<string>>();
  /** The source's podIPs each pod is indexed under in podsByAddress. */
  private sourceIps = new Map<string, readonly string[]>();
  private templates = new Map<string, Map<string, PolicyTemplate>>();
  private selectedBy = new Map<string, Set<string>>();
  private selections!: Selections;
  private setEntries = new Map<string, SetEntry>();
  private elements = new Map<string, readonly string[]>();
  private builds = new Map<string, PodBuild>();
  /** Attachments to rebuild: true when the policies selecting it must be found again. */
  private dirtyPods = new Map<string, boolean>();
  private dirtySets = new Set<string>();
  private touched = { sets: new Set<string>(), pods: new Set<string>() };

  constructor(state: PolicyState, localPods: readonly LocalPod[], options: CompileOptions) {
    this.state = state;
    this.ranges = new LocalRanges(options.localRanges);
    this.rangeTexts = [...options.localRanges].sort().join(' ');
    for (const l of localPods) this.indexLocal(l);
    this.reset();
    this.flush(); // the first program: everything in it is new, nothing to report as touched
  }

  /** The program as it is now. */
  program(): CompiledPolicy {
    const pods = new Map<string, PodPolicy>();
    for (const [k, b] of this.builds) if (b.policy) pods.set(k, b.policy);
    return { sets: new Map(this.elements), pods };
  }

  /**
   * This node's pod ranges, when they may have changed (a range added to the node): every pod's
   * addresses are judged again against them, as after a full relist. Touches nothing when they are the
   * same.
   */
  rangesChanged(ranges: readonly string[]): PolicyTouched {
    const texts = [...ranges].sort().join(' ');
    if (texts === this.rangeTexts) return { sets: new Set(), pods: new Set() };
    this.ranges = new LocalRanges(ranges);
    this.rangeTexts = texts;
    return this.sourceChanged({ kind: 'all' }, this.state);
  }

  /** Takes a source change; returns what it touched. */
  sourceChanged(change: PolicyChange, state: PolicyState): PolicyTouched {
    this.state = state;
    if (change.kind === 'all') this.reset();
    else if (change.kind === 'pod') this.refreshView(change.key);
    else if (change.kind === 'namespace') {
      this.selections.namespaceChanged(this.podsByNamespace.get(change.name) ?? []);
    } else this.policyChanged(change.key);
    return this.flush();
  }

  /** An attachment added, or changed (same key). */
  addLocal(local: LocalPod): PolicyTouched {
    const old = this.locals.get(local.key);
    if (old) this.unindexLocal(old);
    this.indexLocal(local);
    this.localChanged([old, local]);
    return this.flush();
  }

  removeLocal(key: string): PolicyTouched {
    const old = this.locals.get(key);
    if (!old) return this.flush();
    this.unindexLocal(old);
    this.localChanged([old]);
    return this.flush();
  }

  private indexLocal(l: LocalPod): void {
    this.locals.set(l.key, l);
    const pk = objectKey(l.pod.namespace, l.pod.name);
    const byKey = this.localsByPod.get(pk) ?? new Map<string, LocalPod>();
    this.localsByPod.set(pk, byKey.set(l.key, l));
    for (const ip of l.ips) this.localAddresses.set(ip, (this.localAddresses.get(ip) ?? 0) + 1);
  }

  private unindexLocal(l: LocalPod): void {
    this.locals.delete(l.key);
    const pk = objectKey(l.pod.namespace, l.pod.name);
    this.localsByPod.get(pk)?.delete(l.key);
    if (this.localsByPod.get(pk)?.size === 0) this.localsByPod.delete(pk);
    for (const ip of l.ips) {
      const n = (this.localAddresses.get(ip) ?? 1) - 1;
      if (n > 0) this.localAddresses.set(ip, n);
      else this.localAddresses.delete(ip);
    }
  }

  /** The pod views an attachment's coming or going can change: its pod's, and its addresses' holders. */
  private localChanged(versions: Array<LocalPod | undefined>): void {
    const podKeys = new Set<string>();
    for (const l of versions) {
      if (!l) continue;
      this.dirtyPods.set(l.key, true);
      podKeys.add(objectKey(l.pod.namespace, l.pod.name));
      for (const ip of l.ips) for (const k of this.podsByAddress.get(ip) ?? []) podKeys.add(k);
    }
    for (const k of podKeys) this.refreshView(k);
  }

  /** Starts over from the state and the attachments: the first program, and after a full relist. */
  private reset(): void {
    const before = { sets: [...this.elements.keys()], pods: [...this.builds.keys()] };
    this.views = new Map();
    this.podsByNamespace = new Map();
    this.podsByAddress = new Map();
    this.sourceIps = new Map();
    this.selections = new PodSelections(this.views, () => this.state.namespaces);
    this.templates = new Map();
    this.selectedBy = new Map();
    this.setEntries = new Map();
    this.elements = new Map();
    this.builds = new Map();
    for (const [k, p] of this.state.policies) {
      addToMap(this.templates, p.namespace, k, policyTemplate(p, k));
    }
    for (const k of new Set([...this.state.pods.keys(), ...this.localsByPod.keys()])) {
      this.refreshView(k);
    }
    this.selections.takeDirty();
    for (const k of this.locals.keys()) this.dirtyPods.set(k, true);
    for (const s of before.sets) this.touched.sets.add(s);
    for (const p of before.pods) this.touched.pods.add(p);
  }

  private refreshView(podKey: string): void {
    const source = this.state.pods.get(podKey);
    const locals = [...(this.localsByPod.get(podKey)?.values() ?? [])];
    const old = this.views.get(podKey);
    const view = viewPod(source, locals, this.ranges, this.localAddresses);
    const oldSourceIps = this.sourceIps.get(podKey) ?? [];
    for (const ip of oldSourceIps) this.podsByAddress.get(ip)?.delete(podKey);
    if (source?.ips.length) this.sourceIps.set(podKey, source.ips);
    else this.sourceIps.delete(podKey);
    for (const ip of source?.ips ?? []) addTo(this.podsByAddress, ip, podKey);
    if (old) this.podsByNamespace.get(old.pod.namespace)?.delete(podKey);
    if (view) {
      this.views.set(podKey, view);
      addTo(this.podsByNamespace, view.pod.namespace, podKey);
    } else this.views.delete(podKey);
    if (old?.pod === view?.pod && old?.addresses.join() === view?.addresses.join()) return;
    const namespaces = [old?.pod.namespace, view?.pod.namespace].filter((n): n is string => !!n);
    const addressesChanged = old?.addresses.join() !== view?.addresses.join();
    this.selections.podChanged(podKey, [...new Set(namespaces)], addressesChanged);
    for (const k of this.localsByPod.get(podKey)?.keys() ?? []) this.dirtyPods.set(k, true);
  }

  private policyChanged(key: string): void {
    const namespace = key.slice(0, key.indexOf('/'));
    const policy = this.state.policies.get(key);
    const old = this.templates.get(namespace)?.get(key);
    const next = policy ? policyTemplate(policy, key) : undefined;
    if (next) addToMap(this.templates, namespace, key, next);
    else this.templates.get(namespace)?.delete(key);
    for (const [attachment, local] of this.locals) {
      if (local.pod.namespace !== namespace) continue;
      const view = this.views.get(objectKey(local.pod.namespace, local.pod.name));
      const selects = !!next && !!view && policySelects(next, view.pod);
      const selected = this.selectedBy.get(attachment);
      if (!selects && !(old && selected?.has(key))) continue;
      if (selects) addTo(this.selectedBy, attachment, key);
      else selected?.delete(key);
      if (!this.dirtyPods.get(attachment)) this.dirtyPods.set(attachment, false);
    }
  }

  /** Brings rules and sets up to date with what changed; returns (and forgets) what it touched. */
  private flush(): PolicyTouched {
    for (const { sel, numbersChanged } of this.selections.takeDirty()) {
      for (const name of sel.sets) this.dirtySets.add(name);
      if (numbersChanged)
        for (const a of sel.readers) if (!this.dirtyPods.has(a)) this.dirtyPods.set(a, false);
    }
    const dirty = this.dirtyPods;
    this.dirtyPods = new Map();
    for (const [attachment, rescan] of dirty) this.rebuild(attachment, rescan);
    for (const name of this.dirtySets) this.recomputeSet(name);
    this.dirtySets = new Set();
    const touched = this.touched;
    this.touched = { sets: new Set(), pods: new Set() };
    return touched;
  }

  private selecting(attachment: string, view: PodView, rescan: boolean): PolicyTemplate[] {
    const inNs = this.templates.get(view.pod.namespace);
    if (rescan) {
      const keys = new Set<string>();
      for (const [k, t] of inNs ?? []) if (policySelects(t, view.pod)) keys.add(k);
      this.selectedBy.set(attachment, keys);
    }
    const keys = [...(this.selectedBy.get(attachment) ?? [])].sort();
    return keys.flatMap((k) => inNs?.get(k) ?? []);
  }

  private rebuild(attachment: string, rescan: boolean): void {
    const local = this.locals.get(attachment);
    const view = local && this.views.get(objectKey(local.pod.namespace, local.pod.name));
    const old = this.builds.get(attachment);
    let build: PodBuild = { sets: new Map(), groups: new Set() };
    if (local && view) {
      const numbers: NamedPortNumbers = (peer, port) => this.selections.ensure(peer, port).numbers;
      build = buildPodPolicy(local, view.pod, this.selecting(attachment, view, rescan), numbers);
    } else this.selectedBy.delete(attachment);
    if (local) this.builds.set(attachment, build);
    else this.builds.delete(attachment);
    for (const g of build.groups) this.selections.get(g)?.readers.add(attachment);
    for (const [name, spec] of build.sets) if (!old?.sets.has(name)) this.refSet(name, spec);
    for (const g of old?.groups ?? []) {
      const sel = this.selections.get(g);
      if (sel && !build.groups.has(g)) {
        sel.readers.delete(attachment);
        this.selections.releaseIfUnused(sel);
      }
    }
    for (const name of old?.sets.keys() ?? []) if (!build.sets.has(name)) this.unrefSet(name);
    if (JSON.stringify(old?.policy) !== JSON.stringify(build.policy)) this.touched.pods.add(attachment);
  }

  private refSet(name: string, spec: SetSpec): void {
    const entry = this.setEntries.get(name);
    if (entry) {
      entry.refs++;
      return;
    }
    this.setEntries.set(name, { spec, refs: 1 });
    if (spec.kind !== 'block') {
      const named = spec.kind === 'named' ? { name: spec.portName, protocol: spec.protocol } : undefined;
      this.selections.ensure(spec.peer, named).sets.add(name);
    }
    this.dirtySets.add(name);
  }

  private unrefSet(name: string): void {
    const entry = this.setEntries.get(name);
    if (!entry || --entry.refs > 0) return;
    this.setEntries.delete(name);
    this.elements.delete(name);
    this.dirtySets.delete(name);
    this.touched.sets.add(name);
    const spec = entry.spec;
    if (spec.kind === 'block') return;
    const named = spec.kind === 'named' ? { name: spec.portName, protocol: spec.protocol } : undefined;
    const sel = this.selections.ensure(spec.peer, named);
    sel.sets.delete(name);
    this.selections.releaseIfUnused(sel);
  }

  private recomputeSet(name: string): void {
    const entry = this.setEntries.get(name);
    if (!entry) return;
    const spec = entry.spec;
    const next =
      spec.kind === 'block' ? blockElements(spec.cidr, spec.except) : this.selections.elements(spec);
    const old = this.elements.get(name);
    if (old && old.join() === next.join()) return;
    this.elements.set(name, next);
    this.touched.sets.add(name);
  }
}

function addToMap<V>(map: Map<string, Map<string, V>>, outer: string, key: string, value: V): void {
  const inner = map.get(outer) ?? new Map<string, V>();
  map.set(outer, inner.set(key, value));
}
