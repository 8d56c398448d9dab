import type { PeerState, PeerStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// One agent's word on its peers (its PeerStatus messages), kept by name and grouped by peer node. A
// PeerStatus either replaces the book whole or, as a delta ("peer-status-delta"), changes some names
// and drops others; either way the book notes which nodes it moved, so that what is built per node
// from it (dpu-fabric.ts) is made again for those nodes only. At 5,000 peers, making every node's view
// again for each PeerStatus was a large share of what one peer change cost the daemon.

/** How many revisions back movedSince() can answer; older ones make the caller start over. */
const MOVED_LOG_LENGTH = 32;

export class PeerStateBook {
  private readonly byName = new Map<string, PeerState>();
  private readonly byNode = new Map<string, Map<string, PeerState>>();
  private revisionValue = 0;
  /** The nodes each of the last revisions moved: moved[i] is revision `movedFrom + i + 1`'s. */
  private moved: Array<ReadonlySet<string>> = [];
  private movedFrom = 0;

  /** `nodeOf`: the peer node a state's name stands for (undefined: none, the state is kept by name only). */
  constructor(private readonly nodeOf: (name: string) => string | undefined) {}

  /** Goes up by one with each PeerStatus that changed something, and with clear(). */
  get revision(): number {
    return this.revisionValue;
  }

  get size(): number {
    return this.byName.size;
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
   * anything changed.
   */
  apply(ps: PeerStatus): boolean {
    const moved = new Set<string>();
    let any = false;
    if (ps.delta) {
      for (const name of ps.gone) any = this.drop(name, moved) || any;
      for (const p of ps.peers) any = this.put(p, moved) || any;
    } else {
      const listed = new Set<string>();
      for (const p of ps.peers) {
        listed.add(p.name);
        any = this.put(p, moved) || any;
      }
      if (listed.size < this.byName.size)
        for (const name of this.byName.keys()) if (!listed.has(name)) any = this.drop(name, moved) || any;
    }
    if (any) this.changed(moved);
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

  private put(p: PeerState, moved: Set<string>): boolean {
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
