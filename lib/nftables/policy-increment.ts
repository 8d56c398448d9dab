// The next transaction worked out from what changed since the last apply, not from the whole program.
// Rendering and comparing everything (renderProgram, diffPolicy) walks every pod, set and map element:
// at a thousand pods that is ~4 ms of the event loop per apply (a label change, a pod attached), where
// the kernel takes half a millisecond. Here pods and sets are walked once and kept by identity (a
// program keeps the objects of what did not change), and only what changed is rendered and compared.
//
// It gives the transaction the full diff would, or nothing: what it does not work out (a set removed or
// changing kind, the first apply, a table read back after drift) is left to the full rendering. The
// test that holds it to that applies random sequences both ways and compares the results.

import {
  EMPTY,
  minus,
  setDeclaration,
  type MapElementChange,
  type PolicyDiff,
  type SetElementChange,
} from './policy-diff';
import { PolicyProgramError, checkPod, type NftPodPolicy, type NftPolicyProgram } from './policy-program';
import {
  EGRESS_DENIED,
  EGRESS_MAP,
  FORWARD_CHAIN,
  FORWARD_RULES,
  INGRESS_DENIED,
  INGRESS_MAP,
  TABLE_REF,
  renderPod,
  renderSet,
  type RenderedChain,
  type RenderedSet,
  type RulesetState,
  type SetRef,
} from './policy-ruleset';

export interface RenderedPod {
  pod: NftPodPolicy;
  chains: Map<string, RenderedChain>;
}

export interface RenderedProgramSet {
  prefixes: readonly string[];
  sets: [string, RenderedSet][];
}

/** What the last apply rendered, with what an increment needs to know of it. */
export interface LastRendering {
  pods: Map<string, RenderedPod>;
  sets: Map<string, RenderedProgramSet>;
  /** Chain name → how many pods jump to it. */
  users: Map<string, number>;
  /** Host interface → the pod (key) whose it is. */
  owners: Map<string, string>;
}

/** The pods' chains and interfaces of a rendering, counted. */
export function usersAndOwners(
  pods: ReadonlyMap<string, RenderedPod>,
): Pick<LastRendering, 'users' | 'owners'> {
  const users = new Map<string, number>();
  const owners = new Map<string, string>();
  for (const [key, { pod, chains }] of pods) {
    owners.set(pod.hostIf, key);
    for (const name of chains.keys()) users.set(name, (users.get(name) ?? 0) + 1);
  }
  return { users, owners };
}

export interface Increment {
  diff: PolicyDiff;
  /** Makes `last` and `held` what they are once the diff is in the kernel. */
  commit(): void;
}

export function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a === b || (a.length === b.length && a.every((x, i) => x === b[i]));
}

/**
 * The transaction from `held` (the kernel, as the last apply left it) to `program`; undefined when it
 * must be worked out whole. `keep` says whether a pod's earlier rendering still stands.
 */
export function incrementalDiff(
  program: NftPolicyProgram,
  last: LastRendering,
  held: RulesetState,
  keep: (pod: NftPodPolicy, prev: RenderedPod) => boolean,
): Increment | undefined {
  // Only a table the last apply left whole, with nothing of an earlier ruleset in it.
  const declared = [EGRESS_MAP, INGRESS_MAP, EGRESS_DENIED, INGRESS_DENIED].every((m) => held.vmaps.has(m));
  if (!declared || held.chains.get(FORWARD_CHAIN) !== FORWARD_RULES.digest || held.counters.size > 0)
    return undefined;
  for (const name of last.sets.keys()) if (!program.sets.has(name)) return undefined;
  const sets = changedSets(program, last, held);
  if (!sets) return undefined;
  const ref: SetRef = (name, family) => {
    const rendered = (sets.renderings.get(name) ?? last.sets.get(name))?.sets;
    const found = rendered?.find(([, s]) => s.family === family);
    if (!found) throw new PolicyProgramError(`the program lacks address set ${name}`);
    return found[0];
  };
  const pods = changedPods(program, last, keep);
  const entries = new MapEntries(held);
  const users = new Map<string, number>();
  const owners = new Map<string, string | undefined>();
  const added = new Map<string, RenderedChain>();
  const count = (name: string, by: number): void => void users.set(name, (users.get(name) ?? 0) + by);
  for (const { prev } of pods)
    if (prev) {
      for (const [name, chain] of prev.chains) {
        count(name, -1);
        entries.set(chain.direction, prev.pod.hostIf, undefined);
      }
      owners.set(prev.pod.hostIf, undefined);
    }
  const rendered = new Map<string, RenderedPod>();
  for (const { key, pod } of pods) {
    if (!pod) continue;
    checkPod(pod, program.sets);
    const owner = owners.has(pod.hostIf) ? owners.get(pod.hostIf) : last.owners.get(pod.hostIf);
    if (owner !== undefined && owner !== key)
      throw new PolicyProgramError(`pods ${key} and another share host interface ${pod.hostIf}`);
    owners.set(pod.hostIf, key);
    const chains = renderPod(pod, ref);
    rendered.set(key, { pod, chains });
    for (const [name, chain] of chains) {
      count(name, 1);
      added.set(name, chain);
      entries.set(chain.direction, pod.hostIf, name);
    }
  }
  const chains = chainCommands(users, added, last, held);
  const diff: PolicyDiff = {
    before: [...sets.declarations, ...chains.declarations],
    elements: sets.elements,
    rules: chains.rules,
    maps: entries.changes(),
    after: chains.deletions,
  };
  const gone = chains.gone;
  const commit = (): void => {
    for (const [name, r] of sets.renderings) {
      last.sets.set(name, r);
      for (const [nftName, set] of r.sets) held.sets.set(nftName, set.elements);
    }
    for (const { key, pod } of pods) if (!pod) last.pods.delete(key);
    for (const [key, r] of rendered) last.pods.set(key, r);
    for (const [name, delta] of users) {
      const n = (last.users.get(name) ?? 0) + delta;
      if (n > 0) last.users.set(name, n);
      else last.users.delete(name);
    }
    for (const [name, chain] of added) held.chains.set(name, chain.digest);
    for (const name of gone) held.chains.delete(name);
    for (const [ifname, key] of owners)
      if (key === undefined) last.owners.delete(ifname);
      else last.owners.set(ifname, key);
    entries.commit();
  };
  return { diff, commit };
}

/**
 * The chains a change of users needs: those gaining their first user declared and filled (unless the
 * kernel holds them as they are), those losing their last emptied and deleted, after the map elements.
 */
function chainCommands(
  users: ReadonlyMap<string, number>,
  added: ReadonlyMap<string, RenderedChain>,
  last: LastRendering,
  held: RulesetState,
): { declarations: string[]; rules: string[]; deletions: string[]; gone: string[] } {
  const declarations: string[] = [];
  const rules: string[] = [];
  for (const [name, delta] of users) {
    const chain = added.get(name);
    if ((last.users.get(name) ?? 0) > 0 || delta <= 0 || !chain || held.chains.get(name) === chain.digest)
      continue;
    if (!held.chains.has(name)) declarations.push(`add chain ${TABLE_REF} ${name}`);
    else rules.push(`flush chain ${TABLE_REF} ${name}`);
    for (const rule of chain.rules) rules.push(`add rule ${TABLE_REF} ${name} ${rule}`);
  }
  const gone = [...users]
    .filter(([name, delta]) => delta < 0 && (last.users.get(name) ?? 0) + delta === 0)
    .map(([name]) => name);
  const deletions = [
    ...gone.map((name) => `flush chain ${TABLE_REF} ${name}`),
    ...gone.map((name) => `delete chain ${TABLE_REF} ${name}`),
  ];
  return { declarations, rules, deletions, gone };
}

/** The program's sets that are new or changed: renderings, declarations and element changes. */
function changedSets(
  program: NftPolicyProgram,
  last: LastRendering,
  held: RulesetState,
):
  | { renderings: Map<string, RenderedProgramSet>; declarations: string[]; elements: SetElementChange[] }
  | undefined {
  const renderings = new Map<string, RenderedProgramSet>();
  const declarations: string[] = [];
  const elements: SetElementChange[] = [];
  for (const [name, prefixes] of program.sets) {
    const prev = last.sets.get(name);
    if (prev && sameList(prev.prefixes, prefixes)) continue;
    const sets = renderSet(name, prefixes);
    // A set changing kind is a new set under another name, and its chains are rewritten: the full path.
    if (prev && sets.some(([n], i) => n !== prev.sets[i]?.[0])) return undefined;
    renderings.set(name, { prefixes, sets });
    for (const [nftName, set] of sets) {
      if (!prev) declarations.push(setDeclaration(nftName, set));
      const had = (prev && held.sets.get(nftName)) || EMPTY;
      const gone = minus(had, set.elements);
      const added = minus(set.elements, had);
      if (gone.length > 0 || added.length > 0) elements.push({ name: nftName, set, gone, added });
    }
  }
  return { renderings, declarations, elements };
}

/** The pods added, changed (with what they were) and removed (no `pod`) since the last rendering. */
function changedPods(
  program: NftPolicyProgram,
  last: LastRendering,
  keep: (pod: NftPodPolicy, prev: RenderedPod) => boolean,
): Array<{ key: string; pod?: NftPodPolicy; prev?: RenderedPod }> {
  const out: Array<{ key: string; pod?: NftPodPolicy; prev?: RenderedPod }> = [];
  for (const pod of program.pods.values()) {
    const prev = last.pods.get(pod.key);
    if (!prev || !keep(pod, prev)) out.push({ key: pod.key, pod, prev });
  }
  for (const [key, prev] of last.pods) if (!program.pods.has(key)) out.push({ key, prev });
  return out;
}

/** The verdict maps' and denied sets' elements a change sets, compared with what the kernel holds. */
class MapEntries {
  /** Map → interface → the chain it is to jump to ('' in a denied set); undefined: to go. */
  private readonly wanted = new Map<string, Map<string, string | undefined>>();

  constructor(private readonly held: RulesetState) {}

  set(direction: RenderedChain['direction'], ifname: string, chain: string | undefined): void {
    const [map, denied] =
      direction === 'ingress' ? [INGRESS_MAP, INGRESS_DENIED] : [EGRESS_MAP, EGRESS_DENIED];
    this.want(map, ifname, chain);
    this.want(denied, ifname, chain === undefined ? undefined : '');
  }

  changes(): MapElementChange[] {
    const out: MapElementChange[] = [];
    for (const [name, wanted] of this.wanted) {
      const held = this.held.vmaps.get(name) ?? new Map<string, string>();
      const change: MapElementChange = { name, gone: [], added: [] };
      if (name === INGRESS_MAP || name === EGRESS_MAP) change.jumps = new Map();
      for (const [ifname, chain] of wanted) {
        const had = held.get(ifname);
        if (had === chain) continue;
        if (had !== undefined) change.gone.push(ifname);
        if (chain !== undefined) {
          change.added.push(ifname);
          change.jumps?.set(ifname, chain);
        }
      }
      if (change.gone.length > 0 || change.added.length > 0) out.push(change);
    }
    return out;
  }

  commit(): void {
    for (const [name, wanted] of this.wanted) {
      let held = this.held.vmaps.get(name);
      if (!held) this.held.vmaps.set(name, (held = new Map()));
      for (const [ifname, chain] of wanted)
        if (chain === undefined) held.delete(ifname);
        else held.set(ifname, chain);
    }
  }

  private want(map: string, ifname: string, value: string | undefined): void {
    let m = this.wanted.get(map);
    if (!m) this.wanted.set(map, (m = new Map()));
    m.set(ifname, value);
  }
}
