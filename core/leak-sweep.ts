import type { Logger } from './logger';
import type { NetnsOpener } from './netns';
import type { AttachmentRecord } from './store';

// Attachments whose workload vanished without a DEL (a runtime crash, a node-local cleanup) keep their
// addresses and dataplane until something releases them; containerd 1.6 never calls CNI GC. So the
// daemon sweeps: an attachment whose namespace is gone (the path names nothing, or another namespace
// than the one recorded) on two sweeps in a row is detached. Two sightings, and never an attachment
// younger than one interval, so that a namespace caught between its creation and its bind mount, or a
// path being re-pointed, is not mistaken for a dead workload. Adopted attachments (no recorded path,
// see the lost-store recovery) are left alone: their DEL or the next start-up releases them.

export interface SweepTarget {
  rows(): Iterable<AttachmentRecord>;
  /** Detaches the attachment if it is still this row (same key, same creation); true when it did. */
  release(rec: AttachmentRecord, why: string): Promise<boolean>;
}

export interface SweepResult {
  /** Detached by this sweep (or, in a dry run, the ones it would detach). */
  released: string[];
  /** Seen gone for the first time; the next sweep detaches them if they are still gone. */
  suspected: string[];
}

export class LeakSweep {
  /** Key → creation time of the row seen without its namespace on the last sweep. */
  private seenGone = new Map<string, string>();
  private timer?: NodeJS.Timeout;
  private running?: Promise<SweepResult>;

  constructor(
    private readonly target: SweepTarget,
    private readonly netns: NetnsOpener,
    private readonly intervalMs: number,
    private readonly log: Logger,
    private readonly onRelease: () => void,
  ) {}

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

  /** One sweep now; never two at once. */
  sweep(): Promise<SweepResult> {
    this.running ??= this.pass(false).finally(() => (this.running = undefined));
    return this.running;
  }

  /** What a sweep now would do, without doing it or counting as a sighting. */
  preview(): Promise<SweepResult> {
    return this.pass(true);
  }

  private async pass(dryRun: boolean): Promise<SweepResult> {
    const result: SweepResult = { released: [], suspected: [] };
    const seen = new Map<string, string>();
    const minAgeMs = this.intervalMs > 0 ? this.intervalMs : 0;
    const now = Date.now();
    // What the sweep looks at, taken from the rows up front (the store is not read across awaits);
    // the row itself is read again, under the workload's lock, only when it is released.
    const candidates: AttachmentRecord[] = [];
    for (const rec of this.target.rows()) {
      if (rec.netnsPath && now - Date.parse(rec.createdAt) >= minAgeMs) candidates.push(rec);
    }
    // Interfaces of one workload share a namespace: look at each namespace once per sweep.
    const present = new Map<string, boolean>();
    for (const rec of candidates) {
      const ns = `${rec.netnsInode} ${rec.netnsPath}`;
      let alive = present.get(ns);
      if (alive === undefined) {
        // One namespace at a time: a sweep is background work and must not crowd out the API.
        alive = await this.netns.stillPresent(rec.netnsPath, rec.netnsInode);
        present.set(ns, alive);
      }
      if (alive) continue;
      if (this.seenGone.get(rec.key) !== rec.createdAt) {
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
        this.onRelease();
        this.log.info(
          { workloadId: rec.workloadId, ifName: rec.ifName, netns: rec.netnsPath },
          'released an attachment whose network namespace is gone',
        );
      }
    }
    if (!dryRun) this.seenGone = seen;
    return result;
  }
}
