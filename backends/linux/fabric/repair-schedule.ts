// When the fabric converges besides an apply: a periodic pass, a netlink monitor that hears drift
// (debounced, and started again whenever it ends), and a retry with back-off after a converge that
// failed. Its own file because these timers and their order at stop are one concern, apart from what
// a converge does.

import type { Logger } from '../../../core/logger';
import type { NetnsHandle } from '../../../lib/netns/netns-handle';
import { RestartingReader } from '../restarting-reader';
import { DriftMonitor, type KernelEvent } from './drift-monitor';

/** Coalesces a burst of notifications (our own apply makes some) into one converge. */
const MONITOR_DEBOUNCE_MS = 100;

/** A failed converge is tried again after this, doubling per failure up to the maximum. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 10_000;

export interface RepairScheduleOptions {
  logger: Logger;
  /** Full converge period. */
  intervalMs: number;
  /** Repair drift as soon as the kernel reports it. */
  monitor: boolean;
  /** Makes the kernel match the plan once (serialised with applies by the caller). */
  converge: () => Promise<unknown>;
  /** Whether there is anything to converge yet (an apply has given peers). */
  applied: () => boolean;
  /** Whether a notification may mean drift (drift-relevance.ts). */
  concerns: (e: KernelEvent) => boolean;
}

export class RepairSchedule {
  private timer: NodeJS.Timeout | undefined;
  private monitor: RestartingReader<DriftMonitor> | undefined;
  private debounce: NodeJS.Timeout | undefined;
  /** The next try of a converge that failed, and how long the one after it waits. */
  private retry: NodeJS.Timeout | undefined;
  private retryMs = RETRY_FIRST_MS;
  private stopped = false;

  constructor(private readonly opts: RepairScheduleOptions) {}

  /** Starts the periodic pass and, in `ns`, the monitor (each once). */
  start(ns: NetnsHandle | undefined): void {
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.schedule('periodic'), this.opts.intervalMs);
      this.timer.unref();
    }
    if (this.monitor === undefined && this.opts.monitor && ns) {
      this.monitor = new RestartingReader({
        what: 'fabric drift monitor',
        meanwhile: 'the periodic pass still repairs',
        logger: this.opts.logger,
        start: (died) =>
          DriftMonitor.start(
            ns,
            (e) => {
              if (this.opts.concerns(e)) this.schedule('monitor');
            },
            died,
          ),
        // What changed while no monitor listened is known only to a full converge.
        onRestart: () => this.schedule('monitor'),
      });
      void this.monitor.begin();
    }
  }

  /** Why the monitor is down, in words, while it is. */
  down(): string | undefined {
    return this.monitor?.down();
  }

  /** No converge is started from now on. */
  cancel(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.debounce) clearTimeout(this.debounce);
    if (this.retry) clearTimeout(this.retry);
    this.timer = undefined;
  }

  async stopMonitor(): Promise<void> {
    await this.monitor?.stop();
    this.monitor = undefined;
  }

  private schedule(why: 'periodic' | 'monitor'): void {
    if (this.stopped || !this.opts.applied()) return;
    if (why === 'monitor') {
      if (this.debounce) return;
      this.debounce = setTimeout(() => {
        this.debounce = undefined;
        this.run(why);
      }, MONITOR_DEBOUNCE_MS);
      this.debounce.unref();
      return;
    }
    this.run(why);
  }

  private run(why: string): void {
    if (this.stopped) return;
    this.opts.converge().then(
      () => {
        this.retryMs = RETRY_FIRST_MS;
      },
      (err: unknown) => {
        // A repair must not wait for the periodic pass because one request was cut short (EINTR after
        // SIGSTOP/SIGCONT, a socket that timed out): it is tried again soon, less often while it fails.
        const delay = this.retryMs;
        this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2);
        this.opts.logger.warn(
          { why, err: (err as Error).message, retryInMs: delay },
          'fabric converge failed; tried again',
        );
        if (this.retry || this.stopped) return;
        this.retry = setTimeout(() => {
          this.retry = undefined;
          this.run('retry');
        }, delay);
        this.retry.unref();
      },
    );
  }
}
