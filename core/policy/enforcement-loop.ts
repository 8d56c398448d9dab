import type { CompiledPolicy, PolicyDataplane, PolicyTouched } from '../policy-dataplane';

// Takes one backend's compiled program to its dataplane, one apply at a time. Changes that come while
// an apply runs are gathered into the next one (a burst of 200 attaches or label changes costs a few
// transactions, not 200), and each caller waits for the apply that holds its change: the changes are
// numbered, and an apply puts in force every change numbered up to where it began. A failed apply fails
// the callers it held (an attach then fails, undone, rather than answering before its rules are in
// force) and is tried again after a backoff, reading the dataplane afresh.

const FIRST_RETRY_MS = 500;
const LAST_RETRY_MS = 30_000;

interface Waiter {
  upTo: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

export interface EnforcementLoopOptions {
  dataplane: PolicyDataplane;
  /** The program to put in force now (built when an apply begins, so it holds every change so far). */
  program: () => CompiledPolicy;
  /** Called after each apply: how long it took, and whether it failed (and why). */
  applied: (ms: number, err?: Error) => void;
}

export class EnforcementLoop {
  private numbered = 0;
  private inForce = 0;
  private readonly sets = new Set<string>();
  private readonly pods = new Set<string>();
  /** A change that asks for every object to be compared (the periodic check, a failed apply). */
  private everything = false;
  private waiters: Waiter[] = [];
  private running?: Promise<void>;
  private retry?: NodeJS.Timeout;
  private retryMs = FIRST_RETRY_MS;
  private stopped = false;
  /** The last apply's failure, while it lasts. */
  failure?: string;
  /** When the program last went in force (wall clock, for people). */
  lastAppliedAt?: Date;

  constructor(private readonly opts: EnforcementLoopOptions) {}

  /** Records a change and starts an apply; the number to wait for with until(). */
  changed(touched?: PolicyTouched): number {
    if (touched) {
      for (const s of touched.sets) this.sets.add(s);
      for (const p of touched.pods) this.pods.add(p);
    } else this.everything = true;
    this.numbered++;
    this.kick();
    return this.numbered;
  }

  /** Resolves once change `n` is in force; rejects when the apply that held it failed. */
  until(n: number): Promise<void> {
    if (this.inForce >= n) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ upTo: n, resolve, reject }));
  }

  /** Asks the next apply to read the dataplane and put back whatever changed behind its back. */
  recheck(): number {
    this.opts.dataplane.invalidate();
    return this.changed();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    await this.running;
    const err = new Error('NetworkPolicy enforcement stopped with the daemon');
    for (const w of this.waiters.splice(0)) w.reject(err);
  }

  private kick(): void {
    if (this.running || this.retry || this.stopped) return;
    this.running = this.drain().finally(() => {
      this.running = undefined;
      // A change made by a waiter the last apply released runs before this: it found an apply still
      // running and left the change to it, but that apply had already ended.
      if (this.inForce < this.numbered) this.kick();
    });
  }

  private async drain(): Promise<void> {
    while (this.inForce < this.numbered && !this.stopped) {
      const upTo = this.numbered;
      const touched = this.everything ? undefined : { sets: new Set(this.sets), pods: new Set(this.pods) };
      this.sets.clear();
      this.pods.clear();
      this.everything = false;
      const started = performance.now();
      try {
        await this.opts.dataplane.apply(this.opts.program(), touched);
      } catch (err) {
        this.failed(upTo, err as Error, performance.now() - started);
        return;
      }
      this.opts.applied(performance.now() - started);
      this.inForce = upTo;
      this.failure = undefined;
      this.lastAppliedAt = new Date();
      this.retryMs = FIRST_RETRY_MS;
      this.settle(upTo);
    }
  }

  /** Fails the callers the apply held; the next try compares everything, after a backoff. */
  private failed(upTo: number, err: Error, ms: number): void {
    this.opts.applied(ms, err);
    this.failure = err.message;
    this.everything = true;
    this.opts.dataplane.invalidate();
    const held = this.waiters.filter((w) => w.upTo <= upTo);
    this.waiters = this.waiters.filter((w) => w.upTo > upTo);
    for (const w of held) w.reject(err);
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.kick();
    }, this.retryMs).unref();
    this.retryMs = Math.min(this.retryMs * 2, LAST_RETRY_MS);
  }

  private settle(upTo: number): void {
    const done = this.waiters.filter((w) => w.upTo <= upTo);
    this.waiters = this.waiters.filter((w) => w.upTo > upTo);
    for (const w of done) w.resolve();
  }
}
