import type { Logger } from '../logger';
import { monotonicMs } from '../../lib/monotonic-clock';
import type { NetnsPresence } from '../../lib/netns/netns-handle';
import type { NetnsOpener } from '../netns-opener';
import type { AttachmentRecord } from '../store/attachment-record';
import type { SweepResult } from '../workload-service';
import { ownString } from '../../lib/own-string';
import { judgeGone, namespaceOf, type Hold } from './sweep-guard';
import { isHostPort } from '../attach/host-port-row';

// Attachments whose workload vanished without a DEL (a runtime crash, a node-local cleanup) keep their
// addresses and dataplane until something releases them; containerd 1.6 never calls CNI GC. So the
// daemon sweeps: an attachment whose namespace is gone (the path names nothing, or another namespace
// than the one recorded) on two sweeps in a row is detached. Two sightings, and never an attachment
// this process has known for less than one interval, so that a namespace caught between its creation
// and its bind mount, or a path being re-pointed, is not mistaken for a dead workload. Adopted
// attachments (no recorded path, see the lost-store recovery) are left alone: their DEL or the next
// start-up releases them, and so is the host port (its namespace is the node's; attach/host-port-row.ts). A path that looks gone is evidence only when the daemon's view of its
// directory is sound and few look gone at once (sweep-guard.ts); otherwise the sweep releases nothing
// and says why, until the view is sound again or the operator forces it.

export interface SweepTarget {
  rows(): Iterable<AttachmentRecord>;
  /** Detaches the attachment if it is still this row (same key, same creation); true when it did. */
  release(rec: AttachmentRecord, why: string): Promise<boolean>;
}

export interface SweepEvents {
  /** One attachment released. */
  released(): void;
  /** The verdict of each periodic sweep: why it released nothing, or undefined. */
  held(hold: Hold | undefined): void;
}

export class LeakSweep {
  /** Key → creation time of the row seen without its namespace on the last sweep. */
  private seenGone = new Map<string, string>();
  /**
   * Row (key and creation time) → when this process first saw it, on the monotonic clock. The age
   * guard reads this and not the row's recorded createdAt: a wall clock stepped forward would make a
   * row created a moment ago look old enough to release, one stepped back would keep every row young
   * for as long as the step. The age observed here is a lower bound of the real one on any clock. Rows
   * the store held when this process started (knownSinceStart) were recorded by an earlier one, so
   * they are at least as old as this process: they count from its start, the clock's zero.
   */
  private firstSeen = new Map<string, FirstSeen>();
  private timer?: NodeJS.Timeout;
  private running?: Promise<SweepResult>;
  private lastHold?: Hold;

  constructor(
    private readonly target: SweepTarget,
    private readonly netns: NetnsOpener,
    private readonly intervalMs: number,
    private readonly log: Logger,
    private readonly events: SweepEvents,
    private readonly clock: () => number = monotonicMs,
  ) {}

  /** Rows recorded before this process started (read at start-up, before the API serves). */
  knownSinceStart(rows: Iterable<AttachmentRecord>): void {
    for (const rec of rows) {
      if (!rec.netnsPath || isHostPort(rec)) continue;
      const id = ownString(rowId(rec));
      this.firstSeen.set(id, { id, since: 0 });
    }
  }

  /** Why the last periodic sweep released nothing, while it lasts. */
  get hold(): Hold | undefined {
    return this.lastHold;
  }

  start(): void {
    if (this.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => {
      void this.sweep().catch((err: unknown) =>
        this.log.warn({ err: (err as Error).message }, 'leak sweep failed; trying again next interval'),
      );
    }, this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * One sweep now; never two at once. A forced sweep (the operator's `gc --namespaces-gone`) releases
   * what is gone even while the guard holds, and waits for a periodic one under way rather than
   * returning its result.
   */
  async sweep(force = false): Promise<SweepResult> {
    while (this.running) {
      if (!force) return this.running;
      await this.running.catch(() => undefined);
    }
    this.running = this.pass(false, force).finally(() => (this.running = undefined));
    return this.running;
  }

  /** What a forced sweep now would do, without doing it or counting as a sighting. */
  preview(): Promise<SweepResult> {
    return this.pass(true, true);
  }

  private async pass(dryRun: boolean, force: boolean): Promise<SweepResult> {
    const result: SweepResult = { released: [], suspected: [] };
    const seen = new Map<string, string>();
    const minAgeMs = this.intervalMs > 0 ? this.intervalMs : 0;
    const now = this.clock();
    const firstSeen = new Map<string, FirstSeen>();
    const namespaces = new Set<string>();
    // What the sweep looks at, taken from the rows up front (the store is not read across awaits);
    // the row itself is read again, under the workload's lock, only when it is released.
    const candidates: AttachmentRecord[] = [];
    for (const rec of this.target.rows()) {
      if (!rec.netnsPath || isHostPort(rec)) continue;
      namespaces.add(namespaceOf(rec));
      const row = rowId(rec);
      // The entry keeps an own copy of the row's name, made once: `row` is built from views into the
      // whole decoded row, and a map key keeps what its string keeps (lib/own-string.ts).
      const entry = this.firstSeen.get(row) ?? { id: ownString(row), since: now };
      firstSeen.set(entry.id, entry);
      const since = entry.since;
      if (now - since >= minAgeMs) candidates.push(rec);
    }
    if (!dryRun) this.firstSeen = firstSeen;
    // Interfaces of one workload share a namespace: look at each namespace once per sweep.
    const presence = new Map<string, NetnsPresence>();
    const gone: AttachmentRecord[] = [];
    const goneNamespaces = new Map<string, AttachmentRecord>();
    let unseen = 0;
    for (const rec of candidates) {
      const ns = namespaceOf(rec);
      let p = presence.get(ns);
      if (p === undefined) {
        // One namespace at a time: a sweep is background work and must not crowd out the API.
        p = await this.netns.presence(rec.netnsPath, rec.netnsInode);
        presence.set(ns, p);
        if (p === 'unseen') unseen++;
      }
      if (p !== 'gone') continue;
      gone.push(rec);
      goneNamespaces.set(ns, rec);
    }
    if (unseen > 0) {
      this.log.debug({ unseen }, 'namespace paths that exist but show no namespace to the daemon; kept');
    }
    const hold = gone.length ? await judgeGone([...goneNamespaces.values()], namespaces.size) : undefined;
    if (hold) result.held = hold.reason;
    const holding = hold !== undefined && !force;
    for (const rec of gone) {
      if (this.seenGone.get(rec.key) !== rec.createdAt || holding) {
        // Held, it stays a sighting: a forced sweep releases it at once, a sound view sees it again.
        seen.set(rec.key, rec.createdAt);
        result.suspected.push(rec.key);
        continue;
      }
      if (dryRun) {
        result.released.push(rec.key);
        continue;
      }
      if (await this.target.release(rec, `leak sweep: network namespace ${rec.netnsPath} is gone`)) {
        result.released.push(rec.key);
        this.events.released();
        this.log.info(
          { workloadId: rec.workloadId, ifName: rec.ifName, netns: rec.netnsPath, forced: force },
          'released an attachment whose network namespace is gone',
        );
      }
    }
    if (dryRun) return result;
    this.seenGone = seen;
    if (!force) this.judged(hold);
    this.log.debug(
      { released: result.released.length, suspected: result.suspected.length, held: hold?.kind, force },
      'leak sweep pass done',
    );
    return result;
  }

  /** Records a periodic sweep's verdict; logs when it changes, not on every sweep. */
  private judged(hold: Hold | undefined): void {
    if (hold?.reason !== this.lastHold?.reason) {
      if (hold) this.log.warn({ kind: hold.kind }, hold.reason);
      else this.log.info({}, 'leak sweep: the namespaces look sound again; releasing as usual');
    }
    this.lastHold = hold;
    this.events.held(hold);
  }
}

/** When the sweep first saw a row, under the row's name in a string of its own. */
interface FirstSeen {
  id: string;
  since: number;
}

/** The sweep's name for one row: a row re-created under the same key is another row. */
function rowId(rec: AttachmentRecord): string {
  return `${rec.key} ${rec.createdAt}`;
}
