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

const EMPTY: ReadonlySet<string> = new Set();
const quote = (s: string): string => `"${s.replace(/["\\]/g, "'")}"`;

function minus<T>(a: Iterable<T>, b: ReadonlySet<T>): T[] {
  const out: T[] = [];
  for (const x of a) if (!b.has(x)) out.push(x);
  return out;
}

function declarations(have: RulesetState, want: DesiredRuleset, out: string[]): void {
  for (const map of [EGRESS_MAP, INGRESS_MAP])
    if (!have.vmaps.has(map)) out.push(`add map ${TABLE_REF} ${map} { type ifname : verdict; }`);
  for (const set of [EGRESS_DENIED, INGRESS_DENIED])
    if (!have.vmaps.has(set)) out.push(`add set ${TABLE_REF} ${set} { type ifname; counter; }`);
  for (const [name, set] of want.sets)
    if (!have.sets.has(name))
      out.push(
        `add set ${TABLE_REF} ${name} { type ipv${set.family}_addr; ${set.interval ? 'flags interval; ' : ''}` +
          `comment ${quote(set.comment.slice(0, 120))}; }`,
      );
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

function mapElements(have: RulesetState, want: DesiredRuleset, out: string[]): void {
  for (const [map, entries] of want.vmaps) {
    const held = have.vmaps.get(map) ?? new Map<string, string>();
    const gone = [...held].filter(([ifname, chain]) => entries.get(ifname) !== chain).map(([i]) => quote(i));
    const added = [...entries]
      .filter(([ifname, chain]) => held.get(ifname) !== chain)
      .map(([ifname, chain]) => (DENIED_SETS.has(map) ? quote(ifname) : `${quote(ifname)} : jump ${chain}`));
    if (gone.length > 0) out.push(`delete element ${TABLE_REF} ${map} { ${gone.join(', ')} }`);
    if (added.length > 0) out.push(`add element ${TABLE_REF} ${map} { ${added.join(', ')} }`);
  }
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
 * yet): the set elements that differ, and the other commands, to run before and after them.
 */
export interface PolicyDiff {
  before: string[];
  elements: SetElementChange[];
  after: string[];
}

export function diffPolicy(have: RulesetState | undefined, want: DesiredRuleset): PolicyDiff {
  const before: string[] = [];
  const after: string[] = [];
  const held = have ?? { sets: new Map(), vmaps: new Map(), chains: new Map(), counters: new Set<string>() };
  if (!have) before.push(`add table ${TABLE_REF} { comment ${quote(POLICY_MARK)}; }`);
  declarations(held, want, before);
  const elements = setElements(held, want);
  chainRules(held, want, after);
  mapElements(held, want, after);
  deletions(held, want, after);
  return { before, elements, after };
}

/** A diff as one nft script (one transaction); empty when nothing differs. */
export function diffText(diff: PolicyDiff): string {
  const out = [...diff.before, ...elementLines(diff.elements), ...diff.after];
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}

/** The script that makes our table hold exactly `want`, given that it holds `have`. */
export function diffScript(have: RulesetState | undefined, want: DesiredRuleset): string {
  return diffText(diffPolicy(have, want));
}
