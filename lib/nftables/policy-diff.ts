// The one transaction that takes our table from what it holds to what a program needs, touching only
// what differs: set elements added and deleted one by one (a set is never flushed and refilled, so a
// pod's label change or a peer's new address edits elements and nothing else), a chain rewritten
// (flushed and filled again, in the same transaction) only when its rules changed, verdict map
// elements added and deleted, and what is no longer used deleted last, once nothing reaches it. nft
// runs the whole script as one netlink batch: the kernel applies all of it or, on any error, none.

import {
  DENIED_SETS,
  EGRESS_DENIED,
  EGRESS_MAP,
  INGRESS_DENIED,
  FORWARD_CHAIN,
  INGRESS_MAP,
  POLICY_MARK,
  TABLE_REF,
  elementText,
  type DesiredRuleset,
  type RenderedSet,
  type RulesetState,
} from './policy-ruleset';

export const EMPTY: ReadonlySet<string> = new Set();
const quote = (s: string): string => `"${s.replace(/["\\]/g, "'")}"`;

/** The command that declares one of our address sets. */
export function setDeclaration(name: string, set: RenderedSet): string {
  return (
    `add set ${TABLE_REF} ${name} { type ipv${set.family}_addr; ${set.interval ? 'flags interval; ' : ''}` +
    `comment ${quote(set.comment.slice(0, 120))}; }`
  );
}

export function minus<T>(a: Iterable<T>, b: ReadonlySet<T>): T[] {
  const out: T[] = [];
  for (const x of a) if (!b.has(x)) out.push(x);
  return out;
}

function declarations(have: RulesetState, want: DesiredRuleset, out: string[]): void {
  for (const map of [EGRESS_MAP, INGRESS_MAP])
    if (!have.vmaps.has(map)) out.push(`add map ${TABLE_REF} ${map} { type ifname : verdict; }`);
  for (const set of [EGRESS_DENIED, INGRESS_DENIED])
    if (!have.vmaps.has(set)) out.push(`add set ${TABLE_REF} ${set} { type ifname; counter; }`);
  for (const [name, set] of want.sets) if (!have.sets.has(name)) out.push(setDeclaration(name, set));
  for (const name of want.chains.keys()) {
    if (have.chains.has(name)) continue;
    out.push(
      name === FORWARD_CHAIN
        ? `add chain ${TABLE_REF} ${name} { type filter hook forward priority filter; policy accept; }`
        : `add chain ${TABLE_REF} ${name}`,
    );
  }
}

/** One set's elements to delete and to add (canonical prefix text). */
export interface SetElementChange {
  name: string;
  set: RenderedSet;
  gone: string[];
  added: string[];
}

function setElements(have: RulesetState, want: DesiredRuleset): SetElementChange[] {
  const out: SetElementChange[] = [];
  for (const [name, set] of want.sets) {
    const held = have.sets.get(name) ?? EMPTY;
    // The state last applied holds the very element sets it rendered: an unchanged set is not walked.
    if (held === set.elements) continue;
    const gone = minus(held, set.elements);
    const added = minus(set.elements, held);
    if (gone.length > 0 || added.length > 0) out.push({ name, set, gone, added });
  }
  return out;
}

function elementLines(changes: readonly SetElementChange[]): string[] {
  const out: string[] = [];
  for (const { name, set, gone, added } of changes) {
    const text = (e: string): string => elementText(set, e);
    if (gone.length > 0) out.push(`delete element ${TABLE_REF} ${name} { ${gone.map(text).join(', ')} }`);
    if (added.length > 0) out.push(`add element ${TABLE_REF} ${name} { ${added.map(text).join(', ')} }`);
  }
  return out;
}

function chainRules(have: RulesetState, want: DesiredRuleset, out: string[]): void {
  for (const [name, chain] of want.chains) {
    if (have.chains.has(name)) {
      if (have.chains.get(name) === chain.digest) continue;
      out.push(`flush chain ${TABLE_REF} ${name}`);
    }
    for (const rule of chain.rules) out.push(`add rule ${TABLE_REF} ${name} ${rule}`);
  }
}

/**
 * One map's (or denied set's) elements to delete and to add, by interface name; `jumps` gives the chain
 * of each one added to a verdict map (absent for a denied set). A pod moved to another chain is in both.
 */
export interface MapElementChange {
  name: string;
  gone: string[];
  added: string[];
  jumps?: Map<string, string>;
}

function mapElements(have: RulesetState, want: DesiredRuleset): MapElementChange[] {
  const out: MapElementChange[] = [];
  for (const [map, entries] of want.vmaps) {
    const held = have.vmaps.get(map) ?? new Map<string, string>();
    const gone = [...held].filter(([ifname, chain]) => entries.get(ifname) !== chain).map(([i]) => i);
    const added = [...entries].filter(([ifname, chain]) => held.get(ifname) !== chain).map(([i]) => i);
    if (gone.length === 0 && added.length === 0) continue;
    const jumps = DENIED_SETS.has(map)
      ? undefined
      : new Map(added.map((ifname) => [ifname, entries.get(ifname) ?? '']));
    out.push({ name: map, gone, added, jumps });
  }
  return out;
}

function mapLines(changes: readonly MapElementChange[]): string[] {
  const out: string[] = [];
  for (const { name, gone, added, jumps } of changes) {
    const text = (i: string): string => (jumps ? `${quote(i)} : jump ${jumps.get(i)}` : quote(i));
    if (gone.length > 0) out.push(`delete element ${TABLE_REF} ${name} { ${gone.map(quote).join(', ')} }`);
    if (added.length > 0) out.push(`add element ${TABLE_REF} ${name} { ${added.map(text).join(', ')} }`);
  }
  return out;
}

/** What is no longer wanted, after the map elements that jumped to it and the rules that named it. */
function deletions(have: RulesetState, want: DesiredRuleset, out: string[]): void {
  for (const map of have.vmaps.keys()) if (!want.vmaps.has(map)) out.push(`delete map ${TABLE_REF} ${map}`);
  const unused = [...have.chains.keys()].filter((c) => !want.chains.has(c));
  // Flushed first, all of them: a chain may jump to another that goes too.
  for (const chain of unused) out.push(`flush chain ${TABLE_REF} ${chain}`);
  for (const chain of unused) out.push(`delete chain ${TABLE_REF} ${chain}`);
  for (const counter of have.counters) out.push(`delete counter ${TABLE_REF} ${counter}`);
  for (const set of have.sets.keys()) if (!want.sets.has(set)) out.push(`delete set ${TABLE_REF} ${set}`);
}

/**
 * What makes our table hold exactly `want`, given that it holds `have` (undefined: there is no table
 * yet), in the order it runs: declarations, set elements, chains' rules, map elements, deletions.
 */
export interface PolicyDiff {
  before: string[];
  elements: SetElementChange[];
  rules: string[];
  maps: MapElementChange[];
  after: string[];
}

export function diffPolicy(have: RulesetState | undefined, want: DesiredRuleset): PolicyDiff {
  const before: string[] = [];
  const rules: string[] = [];
  const after: string[] = [];
  const held = have ?? { sets: new Map(), vmaps: new Map(), chains: new Map(), counters: new Set<string>() };
  if (!have) before.push(`add table ${TABLE_REF} { comment ${quote(POLICY_MARK)}; }`);
  declarations(held, want, before);
  const elements = setElements(held, want);
  chainRules(held, want, rules);
  const maps = mapElements(held, want);
  deletions(held, want, after);
  return { before, elements, rules, maps, after };
}

/** Whether a diff is nothing but elements: of hash sets of addresses, and of the maps and denied sets. */
export function onlyElements(diff: PolicyDiff): boolean {
  return (
    diff.before.length === 0 &&
    diff.rules.length === 0 &&
    diff.after.length === 0 &&
    diff.elements.every((e) => !e.set.interval)
  );
}

/** A diff as one nft script (one transaction); empty when nothing differs. */
export function diffText(diff: PolicyDiff): string {
  const out = [
    ...diff.before,
    ...elementLines(diff.elements),
    ...diff.rules,
    ...mapLines(diff.maps),
    ...diff.after,
  ];
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}

/** The script that makes our table hold exactly `want`, given that it holds `have`. */
export function diffScript(have: RulesetState | undefined, want: DesiredRuleset): string {
  return diffText(diffPolicy(have, want));
}
