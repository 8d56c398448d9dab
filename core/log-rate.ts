import { monotonicMs } from './monotonic-clock';
// At most one log line per kind of event per interval, each saying how many events it stands for, so
// that a flood (connections over a limit, an agent repeating itself) costs a counter, not a log line.

export class LogRate {
  private readonly kinds = new Map<string, { lastAt: number; pending: number }>();

  constructor(
    private readonly intervalMs = 10_000,
    private readonly now: () => number = monotonicMs,
  ) {}

  /**
   * Counts one event. Returns how many events (this one included) the caller's log line stands for when
   * it should log now, otherwise undefined.
   */
  take(kind: string): number | undefined {
    const t = this.now();
    const k = this.kinds.get(kind);
    if (!k) {
      this.kinds.set(kind, { lastAt: t, pending: 0 });
      return 1;
    }
    k.pending++;
    if (t - k.lastAt < this.intervalMs) return undefined;
    const n = k.pending;
    k.lastAt = t;
    k.pending = 0;
    return n;
  }
}
