import { cidrContains, familyBits, parseAddress, parseCidr, type Cidr } from '../../lib/cidr';

// Which node holds which remote prefix, for the sources that are handed prefixes on someone's word
// (the peers file, Kubernetes Nodes). A prefix is routed only when it lies inside the cluster ranges,
// covers no underlay address (this node's, a peer's or a peer's DPU's: that route would carry the
// tunnel into itself), overlaps none of this node's own ranges (its pods) and overlaps no prefix
// another node already holds (that node's pods). A refused prefix costs its node only that prefix; a
// node whose underlay address lies inside a prefix another node holds is refused whole: the route to
// it would go into that prefix.
//
// The incumbent keeps what it has: a prefix held stays held, whatever a newcomer claims, and the
// newcomer's prefix (or the newcomer, for its underlay) is refused. Among claims new at once, the
// first put (in the order the caller gives: the file's order, the API server's list order) wins, and
// underlay addresses are taken before any prefix: an address a node is reached at is a fact of the
// network, a prefix over it a mistake. A refusal another node caused is settled again the moment
// that node releases a prefix or an address, so a claim is applied as soon as what blocked it goes.
//
// No two held prefixes overlap, of one node or of two, so the held prefixes of a family are disjoint
// spans kept sorted: any overlap is found with one binary search, and a change touches one node.

/** What one node states: its prefixes (canonical CIDR text) and every underlay address it is reached at. */
export interface PrefixClaim {
  node: string;
  prefixes: readonly string[];
  /** Its own addresses and its DPUs'. */
  underlay: readonly string[];
}

/** What the ledger made of a node's claim. */
export interface Settled {
  /** Its prefixes that are routed, in the order claimed. */
  accepted: string[];
  /** Each refused prefix, with why ("10.0.0.0/16 covers the underlay address 10.0.1.2 of this node"). */
  refused: string[];
  /** Why the node as a whole is not routed, when it is not. */
  whole?: string;
}

export interface PrefixBounds {
  /** The cluster's ranges; empty: prefixes are not held to any (the daemon was not told them). */
  cluster: readonly string[];
  /** Where they are configured, for the reasons ("fabric.clusterCidrs"). */
  setting: string;
}

interface Span {
  family: 4 | 6;
  start: bigint;
  /** Exclusive. */
  end: bigint;
  text: string;
  node: string;
}

interface Point {
  family: 4 | 6;
  value: bigint;
  text: string;
  /** '' for this node. */
  node: string;
}

const SELF = '';

export class PrefixLedger {
  private readonly spans: Record<4 | 6, Span[]> = { 4: [], 6: [] };
  private readonly points: Record<4 | 6, Point[]> = { 4: [], 6: [] };
  /** Each node's spans and points, to drop them without a walk of every node's. */
  private readonly spansOf = new Map<string, Span[]>();
  private readonly pointsOf = new Map<string, Point[]>();
  private readonly cluster: Cidr[];
  private own: Cidr[] = [];
  private ownKey = '';
  private readonly claims = new Map<string, PrefixClaim>();
  private readonly outcomes = new Map<string, Settled>();
  /** Nodes with a refusal another node caused: settled again when something is released. */
  private readonly waiting = new Set<string>();
  private released = false;

  constructor(private readonly bounds: PrefixBounds) {
    this.cluster = bounds.cluster.map((c) => parseCidr(c));
  }

  /** What the node's claim came to; undefined for a node never put. */
  outcome(node: string): Settled | undefined {
    return this.outcomes.get(node);
  }

  /**
   * This node's own ranges and underlay addresses; when they change every node is settled again (a
   * held prefix over them is refused now). Returns the nodes whose outcome changed.
   */
  setSelf(own: readonly string[], underlay: readonly string[]): Set<string> {
    const key = JSON.stringify([own, underlay]);
    if (key === this.ownKey) return new Set();
    this.ownKey = key;
    this.own = own.map((c) => parseCidr(c));
    this.dropPoints(SELF);
    for (const a of underlay) {
      const v = address(a);
      if (v) this.addPoint(a, v, SELF);
    }
    return this.put([...this.claims.values()], true);
  }

  /**
   * Settles the claims, in order (the first of two new claims wins). A node whose claim is the one
   * put before is left as it is unless `again`. Returns the nodes whose outcome changed.
   */
  put(claims: readonly PrefixClaim[], again = false): Set<string> {
    const before = new Map<string, Settled | undefined>();
    const todo = claims.filter((c) => again || !sameClaim(this.claims.get(c.node), c));
    for (const c of todo) {
      before.set(c.node, this.outcomes.get(c.node));
      this.claims.set(c.node, c);
    }
    // Every address first, then the prefixes: a prefix new in this batch never refuses a node.
    const whole = new Set<string>();
    for (const c of todo) if (!this.settleUnderlay(c)) whole.add(c.node);
    for (const c of todo) if (!whole.has(c.node)) this.settlePrefixes(c);
    return this.retry(before);
  }

  /** The node is gone: what it held is released. Returns the nodes whose outcome changed. */
  remove(node: string): Set<string> {
    if (!this.claims.delete(node)) return new Set();
    this.dropPoints(node);
    this.dropSpans(node);
    this.outcomes.delete(node);
    this.waiting.delete(node);
    return this.retry(new Map([[node, GONE]]));
  }

  /** Settles again the nodes that waited on something released, until nothing more changes. */
  private retry(before: Map<string, Settled | undefined>): Set<string> {
    for (let round = 0; this.released && this.waiting.size > 0 && round < 10; round++) {
      this.released = false;
      const waiting = [...this.waiting].map((n) => this.claims.get(n)).filter((c) => c !== undefined);
      for (const c of waiting) if (!before.has(c.node)) before.set(c.node, this.outcomes.get(c.node));
      for (const c of waiting) if (this.settleUnderlay(c)) this.settlePrefixes(c);
    }
    this.released = false;
    const changed = new Set<string>();
    for (const [node, was] of before) if (!sameSettled(this.outcomes.get(node), was)) changed.add(node);
    return changed;
  }

  /** Indexes the node's addresses; false (the node refused whole) when one lies in another's prefix. */
  private settleUnderlay(c: PrefixClaim): boolean {
    this.waiting.delete(c.node);
    if (this.pointsOf.has(c.node)) this.dropPoints(c.node, new Set(c.underlay));
    const parsed = c.underlay.map(address);
    for (const [i, a] of c.underlay.entries()) {
      const v = parsed[i];
      if (!v) continue;
      const own = this.own.find((o) => o.family === v.family && cidrContains(o, v.value));
      const held = own ? undefined : this.holder(v.family, v.value, v.value + 1n, c.node);
      if (!own && !held) continue;
      this.dropPoints(c.node);
      this.dropSpans(c.node);
      if (held) this.waiting.add(c.node);
      this.outcomes.set(c.node, {
        accepted: [],
        refused: [],
        whole: own
          ? `its underlay address ${a} lies inside this node's own range ${own.text}`
          : `its underlay address ${a} lies inside ${held!.text}, which node ${held!.node} holds`,
      });
      return false;
    }
    const have = new Set((this.pointsOf.get(c.node) ?? []).map((p) => p.text));
    for (const [i, a] of c.underlay.entries()) {
      const v = parsed[i];
      if (v && !have.has(a)) this.addPoint(a, v, c.node);
    }
    return true;
  }

  /** Settles the node's prefixes: those it held first, then the others in its order. */
  private settlePrefixes(c: PrefixClaim): void {
    const held = new Set((this.spansOf.get(c.node) ?? []).map((s) => s.text));
    // Dropped and taken again in the loop below: only what is not taken again is released.
    const released = this.released;
    this.dropSpans(c.node);
    this.released = released;
    const order = [...c.prefixes.filter((p) => held.has(p)), ...c.prefixes.filter((p) => !held.has(p))];
    const refused = new Map<string, string>();
    const ok = new Set<string>();
    for (const p of order) {
      if (ok.has(p) || refused.has(p)) {
        refused.set(p, `${p} is listed twice`);
        continue;
      }
      let cidr: Cidr;
      try {
        cidr = parseCidr(p);
      } catch (err) {
        refused.set(p, (err as Error).message);
        continue;
      }
      const why = this.refusal(cidr, c.node);
      if (why === undefined) {
        ok.add(p);
        this.addSpan(cidr, c.node);
      } else refused.set(p, why);
    }
    for (const p of held) if (!ok.has(p)) this.released = true;
    this.outcomes.set(c.node, {
      accepted: c.prefixes.filter((p, i) => ok.has(p) && c.prefixes.indexOf(p) === i),
      refused: [...refused.values()],
    });
  }

  /** Why `c` may not be routed to `node`, or undefined. */
  private refusal(c: Cidr, node: string): string | undefined {
    const { start, end } = span(c);
    if (this.cluster.length > 0 && !this.cluster.some((r) => r.family === c.family && inside(c, r)))
      return (
        `${c.text} is outside the cluster ranges (${this.bounds.setting}: ` +
        `${this.cluster.map((r) => r.text).join(', ')})`
      );
    const own = this.own.find((o) => o.family === c.family && overlaps(o, c));
    if (own) return `${c.text} overlaps this node's own range ${own.text}`;
    const point = firstAtOrAfter(this.points[c.family], start, (p) => p.value);
    const covered = this.points[c.family][point];
    if (covered && covered.value < end) {
      if (covered.node !== node && covered.node !== SELF) this.waiting.add(node);
      const whose = covered.node === SELF ? 'this node' : `node ${covered.node}`;
      return `${c.text} covers the underlay address ${covered.text} of ${whose}`;
    }
    const held = this.holder(c.family, start, end, undefined);
    if (held) {
      if (held.node === node) return `${c.text} overlaps ${held.text}, also listed for this node`;
      this.waiting.add(node);
      return `${c.text} overlaps ${held.text}, which node ${held.node} holds`;
    }
    return undefined;
  }

  /** The held span overlapping [start, end), of a node other than `except`. */
  private holder(family: 4 | 6, start: bigint, end: bigint, except: string | undefined): Span | undefined {
    const list = this.spans[family];
    // Spans are disjoint: only the last one starting before `end` can reach into [start, end).
    const i = firstAtOrAfter(list, end, (s) => s.start) - 1;
    const s = list[i];
    return s && s.end > start && s.node !== except ? s : undefined;
  }

  private dropSpans(node: string, keep?: ReadonlySet<string>): void {
    const mine = this.spansOf.get(node) ?? [];
    const kept = mine.filter((s) => keep?.has(s.text) === true);
    for (const s of mine) if (!kept.includes(s)) remove(this.spans[s.family], s, (x) => x.start);
    if (kept.length !== mine.length) this.released = true;
    if (kept.length > 0) this.spansOf.set(node, kept);
    else this.spansOf.delete(node);
  }

  private addSpan(c: Cidr, node: string): void {
    const s: Span = { ...span(c), node };
    insert(this.spans[c.family], s, (x) => x.start);
    const mine = this.spansOf.get(node);
    if (mine) mine.push(s);
    else this.spansOf.set(node, [s]);
  }

  private dropPoints(node: string, keep?: ReadonlySet<string>): void {
    const mine = this.pointsOf.get(node) ?? [];
    const kept = mine.filter((p) => keep?.has(p.text) === true);
    for (const p of mine) if (!kept.includes(p)) remove(this.points[p.family], p, (x) => x.value);
    if (kept.length !== mine.length) this.released = true;
    if (kept.length > 0) this.pointsOf.set(node, kept);
    else this.pointsOf.delete(node);
  }

  private addPoint(text: string, v: { family: 4 | 6; value: bigint }, node: string): void {
    const p: Point = { value: v.value, family: v.family, text, node };
    insert(this.points[v.family], p, (x) => x.value);
    const mine = this.pointsOf.get(node);
    if (mine) mine.push(p);
    else this.pointsOf.set(node, [p]);
  }
}

/** What `remove` compares the outcome of a node gone with: never the same as any. */
const GONE: Settled = { accepted: [], refused: [], whole: '' };

function sameSettled(a: Settled | undefined, b: Settled | undefined): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined || a.whole !== b.whole) return false;
  return sameList(a.accepted, b.accepted) && sameList(a.refused, b.refused);
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function sameClaim(a: PrefixClaim | undefined, b: PrefixClaim): boolean {
  return (
    a !== undefined &&
    a.prefixes.length === b.prefixes.length &&
    a.prefixes.every((p, i) => p === b.prefixes[i]) &&
    a.underlay.length === b.underlay.length &&
    a.underlay.every((u, i) => u === b.underlay[i])
  );
}

function address(text: string): { family: 4 | 6; value: bigint } | undefined {
  try {
    return parseAddress(text);
  } catch {
    return undefined;
  }
}

function span(c: Cidr): Omit<Span, 'node'> {
  const end = c.network + (1n << BigInt(familyBits(c.family) - c.prefixLength));
  return { family: c.family, start: c.network, end, text: c.text };
}

/** Whether `c` lies wholly inside `r` (same family). */
function inside(c: Cidr, r: Cidr): boolean {
  return r.prefixLength <= c.prefixLength && cidrContains(r, c.network);
}

function overlaps(a: Cidr, b: Cidr): boolean {
  return cidrContains(a, b.network) || cidrContains(b, a.network);
}

/** Index of the first element whose key is >= `key` (the list sorted by key). */
function firstAtOrAfter<T>(list: readonly T[], key: bigint, keyOf: (t: T) => bigint): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (keyOf(list[mid] as T) < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function insert<T>(list: T[], item: T, keyOf: (t: T) => bigint): void {
  list.splice(firstAtOrAfter(list, keyOf(item), keyOf), 0, item);
}

/** Removes `item` (by identity) from the list sorted by key. */
function remove<T>(list: T[], item: T, keyOf: (t: T) => bigint): void {
  for (let i = firstAtOrAfter(list, keyOf(item), keyOf); i < list.length; i++)
    if (list[i] === item) {
      list.splice(i, 1);
      return;
    }
}
