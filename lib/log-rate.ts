import { monotonicMs } from './monotonic-clock';
// The daemon's log rate limiter: a flood of one kind of event (connections over a limit, an agent
// repeating itself) costs a counter, not a log line each, so that whoever causes the flood cannot turn
// the daemon's log into its bottleneck. Two rules, by what the log reader needs:
// - take(): at most one line per kind per interval, each saying how many events it stands for; for
//   events that are expected under load, where only the rate matters.
// - occurrence(): the first few events of a kind in full, then every thousandth with its running
//   number; for events that should never happen (an agent sending garbage), where the first lines show
//   what is wrong and the running number shows that it still goes on.

/** occurrence() logs this many events of a kind in full before it thins them out. */
const FIRST_IN_FULL = 10;
/** After those, occurrence() logs one event in this many. */
const THEN_ONE_IN = 1000;

export class LogRate {
  private readonly kinds = new Map<string, { lastAt: number; pending: number }>();
  private readonly occurrences = new Map<string, number>();

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

  /** Counts one event. Returns its running number when the caller should log it, otherwise undefined. */
  occurrence(kind: string): number | undefined {
    const n = (this.occurrences.get(kind) ?? 0) + 1;
    this.occurrences.set(kind, n);
    return n <= FIRST_IN_FULL || n % THEN_ONE_IN === 0 ? n : undefined;
  }
}
