// At most `limit` operations at once; the rest wait in arrival order.
//
// Why Attach goes through one: each step of an attach that finishes wakes the event loop, and the
// steps of every attach in flight that finished meanwhile run back to back before anything else. With
// two hundred attaches admitted at once, those runs grew long enough that a Status call waited over
// 100 ms behind them; with a few dozen admitted, they stay short, and the kernel, which serialises link
// changes anyway, finishes the two hundred no later.

export class ConcurrencyLimit {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`limit must be a positive integer, not ${limit}`);
    }
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running < this.limit) this.running++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await fn();
    } finally {
      // The slot passes straight to the next waiter, if any.
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }

  /** Operations waiting for a slot. */
  get queued(): number {
    return this.waiting.length;
  }
}
