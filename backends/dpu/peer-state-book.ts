import type { PeerState, PeerStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// One agent's word on its peers (its PeerStatus messages), kept by name and grouped by peer node. A
// PeerStatus either replaces the book whole or, as a delta ("peer-status-delta"), changes some names
// and drops others; either way the book notes which nodes it moved, so that what is built per node
// from it (dpu-fabric.ts) is made again for those nodes only: making every node's view again for each
// PeerStatus would be a large share of what one peer change costs the daemon.
//
// The book holds one session's word and only on what that session was sent. An agent naming peers it
// was never sent would grow the daemon without bound, even after its session ended (docs/benchmarks.md):
// such entries are counted and dropped, and the book is freed when its session ends, since what a
// lost agent said is no evidence of anything (Status then says nothing for it, not its last word).

/** How many revisions back movedSince() can answer; older ones make the caller start over. */
const MOVED_LOG_LENGTH = 32;
/** Longest last_error kept (the rest is replaced by a note of its length). */
export const PEER_ERROR_MAX = 256;

/** The session a book holds the word of, and which names that session was sent. */
export interface PeerWordSource {
  session: string;
  /** Whether the agent was sent a FabricPeer of this name (and still should hold it). */
  sent(name: string): boolean;
  /** Entries naming something else were dropped from one PeerStatus: how many, and the first name. */
  unsent?(count: number, first: string): void;
}

export class PeerStateBook {
  private readonly byName = new Map<string, PeerState>();
  private readonly byNode = new Map<string, Map<string, PeerState>>();
  private revisionValue = 0;
  /** The nodes each of the last revisions moved: moved[i] is revision `movedFrom + i + 1`'s. */
  private moved: Array<ReadonlySet<string>> = [];
  private movedFrom = 0;
  private source: PeerWordSource | undefined;
  private unsentValue = 0;

  /** `nodeOf`: the peer node a state's name stands for (undefined: none, the state is kept by name only). */
  constructor(private readonly nodeOf: (name: string) => string | undefined) {}

  /** Goes up by one with each PeerStatus that changed something, and with clear(). */
  get revision(): number {
    return this.revisionValue;
  }

  get size(): number {
    return this.byName.size;
  }

  /** Entries dropped in this daemon's life for naming nothing their session was sent. */
  get unsent(): number {
    return this.unsentValue;
  }

  /** The session whose word the book holds; undefined while none is open. */
  get session(): string | undefined {
    return this.source?.session;
  }

  /** Starts a session's word: empty, taking entries only on what `source.sent` names. */
  open(source: PeerWordSource): void {
    this.clear();
    this.source = source;
  }

  /** The session ended: its word is forgotten, and nothing more is taken until the next open(). */
  close(session: string): void {
    if (this.source?.session !== session) return;
    this.source = undefined;
    this.clear();
  }

  values(): IterableIterator<PeerState> {
    return this.byName.values();
  }

  get(name: string): PeerState | undefined {
    return this.byName.get(name);
  }

  /** The peer nodes some state names. */
  nodes(): IterableIterator<string> {
    return this.byNode.keys();
  }

  /** The states naming `node`, by name. */
  statesOf(node: string): ReadonlyMap<string, PeerState> | undefined {
    return this.byNode.get(node);
  }

  /**
   * Takes in a PeerStatus: a whole one replaces every state, a delta drops the names in `gone` and
   * then sets those in `peers`. A state equal to the one held keeps the held object. Returns whether
   * anything changed. Entries naming nothing the open session was sent (all of them while none is
   * open) are dropped and counted.
   */
  apply(ps: PeerStatus): boolean {
    const moved = new Set<string>();
    let any = false;
    let unsent = 0;
    let first = '';
    const taken = (p: PeerState): boolean => {
      if (this.source?.sent(p.name)) return true;
      if (unsent++ === 0) first = p.name;
      return false;
    };
    if (ps.delta) {
      for (const name of ps.gone) any = this.drop(name, moved) || any;
      for (const p of ps.peers) if (taken(p)) any = this.put(p, moved) || any;
    } else {
      const listed = new Set<string>();
      for (const p of ps.peers) {
        if (!taken(p)) continue;
        listed.add(p.name);
        any = this.put(p, moved) || any;
      }
      if (listed.size < this.byName.size)
        for (const name of this.byName.keys()) if (!listed.has(name)) any = this.drop(name, moved) || any;
    }
    if (any) this.changed(moved);
    if (unsent > 0) {
      this.unsentValue += unsent;
      this.source?.unsent?.(unsent, first.slice(0, 256));
    }
    return any;
  }

  /** Forgets every state (a new session starts with none). */
  clear(): void {
    if (this.byName.size === 0) return;
    const moved = new Set(this.byNode.keys());
    this.byName.clear();
    this.byNode.clear();
    this.changed(moved);
  }

  /**
   * The nodes whose states changed after revision `since`; undefined when that is too far back to
   * tell (or a state without a node changed), and the caller should look at every node.
   */
  movedSince(since: number): ReadonlySet<string> | undefined {
    if (since === this.revisionValue) return new Set();
    if (since < this.movedFrom || since > this.revisionValue) return undefined;
    const out = new Set<string>();
    for (const nodes of this.moved.slice(since - this.movedFrom)) for (const n of nodes) out.add(n);
    return out;
  }

  private put(given: PeerState, moved: Set<string>): boolean {
    const p = withShortError(given);
    const held = this.byName.get(p.name);
    if (held && samePeerState(held, p)) return false;
    this.byName.set(p.name, p);
    const node = this.nodeOf(p.name);
    if (node === undefined) return true;
    let states = this.byNode.get(node);
    if (!states) {
      states = new Map();
      this.byNode.set(node, states);
    }
    states.set(p.name, p);
    moved.add(node);
    return true;
  }

  private drop(name: string, moved: Set<string>): boolean {
    if (!this.byName.delete(name)) return false;
    const node = this.nodeOf(name);
    if (node === undefined) return true;
    const states = this.byNode.get(node);
    states?.delete(name);
    if (states?.size === 0) this.byNode.delete(node);
    moved.add(node);
    return true;
  }

  /** A new revision, which moved `moved` (states without a node may have changed too). */
  private changed(moved: ReadonlySet<string>): void {
    this.revisionValue += 1;
    this.moved.push(moved);
    if (this.moved.length > MOVED_LOG_LENGTH) {
      this.moved.shift();
      this.movedFrom += 1;
    }
  }
}

/** The state with its last_error cut to PEER_ERROR_MAX characters, copied so the long one can go. */
export function withShortError(p: PeerState): PeerState {
  if (p.lastError.length <= PEER_ERROR_MAX) return p;
  const cut = p.lastError.length - PEER_ERROR_MAX;
  // A slice of a long string keeps the whole one alive: the kept text is copied out of it.
  const kept = Buffer.from(p.lastError.slice(0, PEER_ERROR_MAX), 'utf8').toString('utf8');
  return { ...p, lastError: `${kept}… (${cut} more characters)` };
}

export function samePeerState(a: PeerState, b: PeerState): boolean {
  return (
    a.name === b.name &&
    a.reachable === b.reachable &&
    a.offloaded === b.offloaded &&
    a.txPackets === b.txPackets &&
    a.rxPackets === b.rxPackets &&
    a.lastError === b.lastError
  );
}
