import { monotonicMs } from '../../lib/monotonic-clock';

// Applies paced to what they cost. Every change of the peer table is applied, coalesced; but a record
// that flaps every 100 ms would otherwise cost an apply (a plan of the whole table, a netlink dump,
// nft with the whole set) per flap. So applies draw on a budget of apply time that refills at a share
// of the clock: a daemon that was quiet has the whole budget, and the few applies of a start-up or of
// one change (a node's blocks, then its tunnel addresses, then a peer's) run at once, however long each
// takes on a loaded machine; only changes that keep coming empty it, and then each apply waits until
// the budget is back above zero, so a flapping record costs at most that share of the daemon's time
// over any long stretch, and the state it leaves is applied whole at the next turn.

export interface ApplyPacerOptions {
  /** Share of the time applies may take over a long stretch (0 < share ≤ 1; default 0.1). */
  share?: number;
  /** Apply time a quiet daemon may spend at once before pacing starts (ms, default 2,000). */
  burstMs?: number;
  /** The longest wait it imposes (ms, default 5,000). */
  maxWaitMs?: number;
  /** Monotonic clock (ms). */
  clock?: () => number;
}

export class ApplyPacer {
  /** Apply time left to spend (ms), as of `at`; negative: spent ahead of the refill. */
  private credit: number;
  private at: number;
  private readonly share: number;
  private readonly burstMs: number;
  private readonly maxWaitMs: number;
  private readonly clock: () => number;

  constructor(opts: ApplyPacerOptions = {}) {
    this.share = Math.min(1, Math.max(0.001, opts.share ?? 0.1));
    this.burstMs = Math.max(0, opts.burstMs ?? 2000);
    this.maxWaitMs = opts.maxWaitMs ?? 5000;
    this.clock = opts.clock ?? monotonicMs;
    this.credit = this.burstMs;
    this.at = this.clock();
  }

  /** How long to wait before the next apply starts: at least `minMs` (the coalescing delay). */
  delay(minMs: number): number {
    const credit = this.refill();
    if (credit >= 0) return minMs;
    return Math.min(this.maxWaitMs, Math.max(minMs, Math.ceil(-credit / this.share)));
  }

  /** Runs one apply, charging its duration to the budget. */
  async time(apply: () => Promise<void>): Promise<void> {
    const start = this.clock();
    try {
      await apply();
    } finally {
      this.refill();
      this.credit -= this.clock() - start;
    }
  }

  private refill(): number {
    const now = this.clock();
    this.credit = Math.min(this.burstMs, this.credit + (now - this.at) * this.share);
    this.at = now;
    return this.credit;
  }
}
