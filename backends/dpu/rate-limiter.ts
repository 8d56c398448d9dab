import { monotonicMs } from '../../lib/monotonic-clock';

// A token bucket. Used for agent heartbeats: a healthy agent sends one per interval, so a handful of
// tokens absorbs jitter and reconnect bursts while a flood is cut off without costing the daemon more
// than a counter per message.

export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly capacity: number,
    /** Tokens added per millisecond. */
    private readonly refillPerMs: number,
    private readonly now: () => number = monotonicMs,
  ) {
    this.tokens = capacity;
    this.last = now();
  }

  /** Takes one token; false when the bucket is empty. */
  take(): boolean {
    const t = this.now();
    this.tokens = Math.min(this.capacity, this.tokens + (t - this.last) * this.refillPerMs);
    this.last = t;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
