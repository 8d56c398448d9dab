// Admission of Attach calls: at most `maxInFlight` at once (more are refused with RESOURCE_EXHAUSTED,
// so a flood gets a fast, retryable answer instead of a growing queue), and of those at most
// `concurrency` running; the rest wait in arrival order.
//
// Why running attaches are limited: each step of an attach that finishes wakes the event loop, and the
// steps of every attach in flight that finished meanwhile run back to back before anything else. With
// two hundred attaches running at once, those runs grew long enough that a Status call waited over
// 100 ms behind them; with a few dozen, they stay short, and the kernel, which serialises link
// changes anyway, finishes the two hundred no later.

import { exhausted } from './errors';

export class Admission {
  private admitted = 0;
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly maxInFlight: number,
    private readonly concurrency: number,
  ) {
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError(`concurrency must be a positive integer, not ${concurrency}`);
    }
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.admitted >= this.maxInFlight) {
      throw exhausted(`too many Attach calls in flight (${this.maxInFlight}); retry shortly`);
    }
    this.admitted++;
    try {
      if (this.running < this.concurrency) this.running++;
      else await new Promise<void>((resolve) => this.waiting.push(resolve));
      try {
        return await fn();
      } finally {
        // The slot passes straight to the next waiter, if any.
        const next = this.waiting.shift();
        if (next) next();
        else this.running--;
      }
    } finally {
      this.admitted--;
    }
  }
}
