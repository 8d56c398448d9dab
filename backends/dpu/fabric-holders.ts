import type { Logger } from '../../core/logger';

// Who holds each tunnel endpoint identity (VTEP MAC, address) in an agent's fabric plan, kept in the
// daemon's store across restarts. The planner gives an identity two endpoints state to the one that
// held it in the previous plan (fabric-plan.ts); a restarted daemon has no previous plan, and would
// give it by name order, so a newcomer named first would take the incumbent's FDB entry on the DPU
// with the first snapshot. Restored before an agent's first plan, the holders keep the incumbent.
//
// Why not the agent's word: it states none of its FDB entries (PeerStatus names its FabricPeers, with
// no MAC or address, and only after the snapshot that a plan without the holders would already have
// changed), and an agent away at the restart states nothing at all.
//
// One value per agent, written only when its holders changed (the planner says so), off any call's
// path: a timer gathers the changes of a burst of applies into one write of the holders as they are
// then. A daemon that stops or crashes within that delay of a change restarts with the holders before
// it. Nothing is written once the fabric stops: the daemon closes the store before it stops the fabric.

/** Where the holders are kept: the daemon's store, one record per agent. */
export interface HolderRecord {
  /** The agent's record as stored (checked here), or undefined. */
  fabricHolders(agentId: string): unknown;
  /**
   * Writes the agent's record (undefined: removes it) in one durable write. Once the store is closed
   * it rejects: a write to a closed store must never reach lmdb, which would end the process.
   */
  putFabricHolders(agentId: string, value: StoredHolders | undefined): Promise<void>;
}

/** One agent's holders as stored: identity and holder, in turn (an array: no record shape per key). */
export interface StoredHolders {
  pairs: string[];
}

/** How long after a change its write waits for the next ones. */
export const HOLDER_WRITE_DELAY_MS = 1000;

/** An agent's holders, read when its write goes; undefined: its record is removed. */
type Pending = (() => ReadonlyMap<string, string>) | undefined;

export class DurableHolders {
  private record: HolderRecord | undefined;
  private stopped = false;
  /** Agents whose stored holders were read already: only a planner's first plan takes them. */
  private readonly consulted = new Set<string>();
  private readonly pending = new Map<string, Pending>();
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly open: () => HolderRecord,
    private readonly log: Logger,
    private readonly delayMs = HOLDER_WRITE_DELAY_MS,
  ) {}

  /** The holders the store kept for the agent, the first time it is asked; undefined afterwards. */
  restored(agentId: string): ReadonlyMap<string, string> | undefined {
    if (this.consulted.has(agentId)) return undefined;
    this.consulted.add(agentId);
    let value: unknown;
    try {
      value = this.store().fabricHolders(agentId);
    } catch (err) {
      this.log.warn(
        { agentId, err: (err as Error).message },
        'cannot read the stored holders of the fabric endpoints; the first plan gives clashing ones by name order',
      );
      return undefined;
    }
    if (value === undefined) return undefined;
    const held = decode(value);
    if (!held)
      this.log.warn(
        { agentId },
        'the stored holders of the fabric endpoints are not readable; the first plan gives clashing ones by name order',
      );
    return held;
  }

  /** The agent's holders changed: `current` gives them as they are when the write goes. */
  changed(agentId: string, current: () => ReadonlyMap<string, string>): void {
    this.consulted.add(agentId);
    this.pending.set(agentId, current);
    this.schedule();
  }

  /** The agent left the fabric: its holders go with its plan. */
  forget(agentId: string): void {
    this.consulted.add(agentId);
    this.pending.set(agentId, undefined);
    this.schedule();
  }

  /** Writes what is pending now; resolves once every write so far is done. */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = [...this.pending];
    this.pending.clear();
    this.writing = this.writing.then(() => this.write(batch));
    return this.writing;
  }

  /** Nothing more is written: what is pending is dropped (the store may be closed already). */
  stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.pending.clear();
    return this.writing;
  }

  private schedule(): void {
    if (this.timer || this.stopped) return;
    this.timer = setTimeout(() => void this.flush(), this.delayMs);
    this.timer.unref();
  }

  private async write(batch: Array<[string, Pending]>): Promise<void> {
    for (const [agentId, current] of batch) {
      if (this.stopped) return;
      try {
        await this.store().putFabricHolders(agentId, current && encode(current()));
      } catch (err) {
        // The next change writes them again; until then a restart plans from the last ones written.
        this.log.warn(
          { agentId, err: (err as Error).message },
          'cannot record the holders of the fabric endpoints',
        );
      }
    }
  }

  private store(): HolderRecord {
    this.record ??= this.open();
    return this.record;
  }
}

function encode(holders: ReadonlyMap<string, string>): StoredHolders {
  const pairs: string[] = [];
  holders.forEach((holder, identity) => pairs.push(identity, holder));
  return { pairs };
}

function decode(value: unknown): Map<string, string> | undefined {
  const pairs = (value as Partial<StoredHolders> | null)?.pairs;
  if (!Array.isArray(pairs) || pairs.length % 2 !== 0) return undefined;
  const out = new Map<string, string>();
  for (let i = 0; i < pairs.length; i += 2) {
    const [identity, holder] = [pairs[i] as unknown, pairs[i + 1] as unknown];
    if (typeof identity !== 'string' || typeof holder !== 'string') return undefined;
    out.set(identity, holder);
  }
  return out;
}
