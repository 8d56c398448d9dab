import { monotonicMs } from '../monotonic-clock';

// Applies paced to what they cost. Every change of the peer table is applied, coalesced; but a record
// that flaps every 100 ms would otherwise cost an apply (a plan of the whole table, a netlink dump,
// nft with the whole set) per flap. So the next apply starts no sooner than the last one's duration,
// divided by the share of time applies may take, after the last one began: at a few peers an apply
// takes a millisecond and the pace is unchanged, at thousands a flapping record costs at most that
// share of the daemon's time, and the state it leaves is applied whole at the next turn.

export interface ApplyPacerOptions {
  /** Share of the time applies may take (0 < share ≤ 1; default 0.1). */
  share?: number;
  /** The longest wait it imposes (ms, default 5,000). */
  maxWaitMs?: number;
  /** Monotonic clock (ms). */
  clock?: () => number;
}

export class ApplyPacer {
  private startedAt?: number;
  /** Duration of the last apply that finished (ms). */
  private lastMs = 0;
  private readonly share: number;
  private readonly maxWaitMs: number;
  private readonly clock: () => number;

  constructor(opts: ApplyPacerOptions = {}) {
    this.share = Math.min(1, Math.max(0.001, opts.share ?? 0.1));
    this.maxWaitMs = opts.maxWaitMs ?? 5000;
    this.clock = opts.clock ?? monotonicMs;
  }

  /** How long to wait before the next apply starts: at least `minMs` (the coalescing delay). */
  delay(minMs: number): number {
    if (this.startedAt === undefined) return minMs;
    const earliest = this.startedAt + this.lastMs / this.share;
    return Math.min(this.maxWaitMs, Math.max(minMs, earliest - this.clock()));
  }

  /** Runs one apply, timing it. */
  async time(apply: () => Promise<void>): Promise<void> {
    const start = this.clock();
    this.startedAt = start;
    try {
      await apply();
    } finally {
      this.lastMs = this.clock() - start;
    }
  }
}
