// Which objects of `table inet workloadnet` are ours. The table's name is only a name: an operator may
// add a chain of their own to it, or make a table of that name before we ever ran. So every table,
// chain, set and counter we create carries our mark as its comment, and only what carries it is
// flushed, rewritten or deleted; a foreign object with one of our names is refused in words, never
// touched. The kernel keeps a comment for the object's life and `add` never changes the comment of an
// object that exists (tried on 6.18 with nft 1.0.6), so an object cannot become ours by being declared
// again: the mark is set at creation only.
//
// One exception, so that an upgrade does not leave the filter stuck on a stale peer set: the table as
// the previous version made it (no comments, exactly its seven objects, nothing else) is ours by its
// exact shape, and is replaced by a marked one in the same transaction that programs it.
//
// Read from `nft -t list table …` (terse: without set elements): nft 1.0.6 leaves the comments of
// tables and chains out of its JSON, not out of its text.

/** The comment every object of ours carries (also the alias of our VXLAN device). */
export const OUR_MARK = 'workloadnet fabric';

/** The objects the previous version put in the table, unmarked. */
export const LEGACY_OBJECTS: readonly string[] = [
  'set vxlan_peers4',
  'set vxlan_peers6',
  'counter vxlan_filtered',
  'counter vxlan_untracked',
  'chain vxlan_input',
  'chain vxlan_notrack_out',
  'chain vxlan_notrack_in',
];

/** One object of the table: its kind (`chain`, `set`, `counter`, `map`, `ct helper`, …) and name. */
export interface TableObject {
  kind: string;
  name: string;
  comment?: string;
  /** A counter's packets. */
  packets?: number;
}

export interface TableListing {
  comment?: string;
  objects: TableObject[];
}

/** The table as nft's terse text listing shows it. */
export function parseListing(text: string): TableListing {
  const out: TableListing = { objects: [] };
  let current: TableObject | undefined;
  for (const line of text.split('\n')) {
    const object = /^\t([a-z][a-z ]*?) ("[^"]*"|\S+) \{$/.exec(line);
    if (object?.[1] !== undefined && object[2] !== undefined) {
      current = { kind: object[1], name: object[2].replace(/^"|"$/g, '') };
      out.objects.push(current);
      continue;
    }
    const tableComment = /^\tcomment "(.*)"$/.exec(line);
    if (tableComment?.[1] !== undefined) {
      out.comment = tableComment[1];
      continue;
    }
    const objectComment = /^\t\tcomment "(.*)"$/.exec(line);
    if (objectComment?.[1] !== undefined && current && current.comment === undefined)
      current.comment = objectComment[1];
    const packets = /^\t\tpackets (\d+) bytes \d+$/.exec(line);
    if (packets?.[1] !== undefined && current?.kind === 'counter') current.packets = Number(packets[1]);
    if (line === '\t}') current = undefined;
  }
  return out;
}

/**
 * What programming the table may do:
 * - `absent`: there is none, create it;
 * - `ours`: it carries our mark and every object with one of our names does;
 * - `legacy`: the previous version's table, to be replaced whole;
 * - `foreign`: something with our names is not ours (`why` names it and what to do).
 */
export type Ownership =
  { state: 'absent' | 'ours' | 'legacy' } | { state: 'foreign'; why: string; objects: TableObject[] };

const id = (o: Pick<TableObject, 'kind' | 'name'>): string => `${o.kind} ${o.name}`;

export function ownership(
  table: string,
  listing: TableListing | undefined,
  ourObjects: readonly string[],
): Ownership {
  if (!listing) return { state: 'absent' };
  if (listing.comment !== OUR_MARK) {
    const ids = listing.objects.map(id).sort();
    if (ids.length === LEGACY_OBJECTS.length && ids.every((x, i) => x === [...LEGACY_OBJECTS].sort()[i]))
      return { state: 'legacy' };
    return {
      state: 'foreign',
      objects: [],
      why:
        `table ${table} exists and is not ours (its comment is not "${OUR_MARK}"); ` +
        `rename or delete it (nft delete table ${table}), nothing of it was changed`,
    };
  }
  const names = new Set(ourObjects);
  // Our names only by name: a chain called like one of our sets is no clash in nft.
  const clashing = listing.objects.filter((o) => names.has(id(o)) && o.comment !== OUR_MARK);
  if (clashing.length === 0) return { state: 'ours' };
  return {
    state: 'foreign',
    objects: clashing,
    why:
      `${clashing.map((o) => `${o.kind} ${o.name}`).join(', ')} in table ${table} ` +
      `${clashing.length === 1 ? 'is' : 'are'} not ours (no comment "${OUR_MARK}"); ` +
      `rename or delete ${clashing.length === 1 ? 'it' : 'them'}, nothing of ${clashing.length === 1 ? 'it' : 'them'} was changed`,
  };
}

/**
 * The objects of ours a removal may delete, and whether the table goes too (it does only when it is
 * ours and nothing else is left in it). Undefined: nothing of ours to remove.
 */
export function removable(
  listing: TableListing | undefined,
  ourObjects: readonly string[],
): { objects: TableObject[]; table: boolean } | undefined {
  if (!listing) return undefined;
  const state = ownership('', listing, ourObjects).state;
  if (state === 'legacy') return { objects: [], table: true };
  if (listing.comment !== OUR_MARK) return undefined;
  const names = new Set(ourObjects);
  const objects = listing.objects.filter((o) => names.has(id(o)) && o.comment === OUR_MARK);
  return { objects, table: objects.length === listing.objects.length };
}
