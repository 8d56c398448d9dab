// Keeps a long-lived reader (the fabric's drift monitor, the netlink thread) running: whatever ends it
// other than stop() (a read error, a thread that died, a start that failed), it is started again after
// a back-off, 100 ms doubling to 10 s, reset once it has stayed up longer than the longest wait. A
// reader that is down says so in words for Status until it is up again.
//
// The back-off is bounded because what ends a reader is usually passing (a signal, a full buffer, a
// namespace that came back), and a repair that waits minutes is no repair; it backs off at all so that
// one that fails at every start (a missing capability) costs a log line every 10 s, not a busy loop.

import type { Logger } from '../../core/logger';

/** What a reader is to its keeper: something to stop. */
export interface StoppableReader {
  stop(): Promise<void>;
}

export interface RestartingReaderOptions<R extends StoppableReader> {
  /** The reader as a person reads it in the log and in Status ("fabric drift monitor"). */
  what: string;
  /** Starts one; `died` is called (at most once counts) when it ends by itself. */
  start: (died: (why: string) => void) => R | Promise<R>;
  /** Called with a reader started after one that died: what it would have heard meanwhile is lost. */
  onRestart?: (reader: R) => void;
  /** What a down reader costs, for the words in Status ("the periodic pass still repairs"). */
  meanwhile?: string;
  logger: Logger;
  firstDelayMs?: number;
  maxDelayMs?: number;
}

const FIRST_DELAY_MS = 100;
const MAX_DELAY_MS = 10_000;

export class RestartingReader<R extends StoppableReader> {
  private reader: R | undefined;
  /** Counts starts: a death reported by an earlier reader is not the current one's. */
  private generation = 0;
  private delayMs: number;
  private upSince = 0;
  private timer: NodeJS.Timeout | undefined;
  private downSince: Date | undefined;
  private downWhy = '';
  private retryAt = 0;
  private stopped = false;
  private restarts = 0;

  constructor(private readonly opts: RestartingReaderOptions<R>) {
    this.delayMs = opts.firstDelayMs ?? FIRST_DELAY_MS;
  }

  /** The running reader, if one is up. */
  get current(): R | undefined {
    return this.reader;
  }

  /** Readers started after one that died or failed to start. */
  get restartCount(): number {
    return this.restarts;
  }

  /** Starts the first reader; a failure is reported and retried like a death. */
  async begin(): Promise<void> {
    await this.launch(false);
  }

  /** Why the reader is down and when it is tried again, in words; undefined while it runs. */
  down(): string | undefined {
    if (this.stopped || this.downSince === undefined) return undefined;
    const inMs = Math.max(0, this.retryAt - Date.now());
    return (
      `${this.opts.what} down since ${this.downSince.toISOString()} (${this.downWhy}); ` +
      `started again in ${(inMs / 1000).toFixed(1)} s` +
      (this.opts.meanwhile ? `; ${this.opts.meanwhile}` : '')
    );
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.generation++;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const r = this.reader;
    this.reader = undefined;
    await r?.stop();
  }

  private async launch(restart: boolean): Promise<void> {
    if (this.stopped) return;
    const generation = ++this.generation;
    let reader: R;
    try {
      reader = await this.opts.start((why) => this.died(generation, why));
    } catch (err) {
      this.failed(`${restart ? 'restart' : 'start'} failed: ${(err as Error).message}`);
      return;
    }
    if (this.stopped || generation !== this.generation) {
      // Stopped, or it died while starting (already rescheduled): this one is not kept.
      await reader.stop().catch(() => undefined);
      return;
    }
    this.reader = reader;
    this.upSince = Date.now();
    if (restart) {
      this.restarts++;
      this.opts.logger.info(
        { reader: this.opts.what, restarts: this.restarts },
        `${this.opts.what} running again`,
      );
    }
    this.downSince = undefined;
    if (restart) this.opts.onRestart?.(reader);
  }

  private died(generation: number, why: string): void {
    if (this.stopped || generation !== this.generation) return;
    this.generation++;
    const dead = this.reader;
    this.reader = undefined;
    // Its socket or thread is released; a reader that ended by itself stops at once.
    void dead?.stop().catch(() => undefined);
    this.failed(why);
  }

  private failed(why: string): void {
    const max = this.opts.maxDelayMs ?? MAX_DELAY_MS;
    // Up longer than the longest wait: this is a new failure, not the same one again.
    if (this.upSince > 0 && Date.now() - this.upSince > max)
      this.delayMs = this.opts.firstDelayMs ?? FIRST_DELAY_MS;
    this.upSince = 0;
    const delay = this.delayMs;
    this.delayMs = Math.min(max, this.delayMs * 2);
    this.downSince ??= new Date();
    this.downWhy = why;
    this.retryAt = Date.now() + delay;
    this.opts.logger.warn(
      { reader: this.opts.what, why, retryInMs: delay },
      `${this.opts.what} stopped; starting it again` +
        (this.opts.meanwhile ? ` (${this.opts.meanwhile})` : ''),
    );
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.launch(true);
    }, delay);
    this.timer.unref();
  }
}
