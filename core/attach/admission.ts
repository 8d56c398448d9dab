// Admission of Attach calls: at most `maxInFlight` at once (more are refused with RESOURCE_EXHAUSTED,
// so a flood gets a fast, retryable answer instead of a growing queue), and of those at most
// `concurrency` running; the rest wait in arrival order.
//
// Why running attaches are limited: each step of an attach that finishes wakes the event loop, and the
// steps of every attach in flight that finished meanwhile run back to back before anything else. With
// two hundred attaches running at once, those runs grow long enough to hold a Status call back; with a
// few dozen they stay short (docs/benchmarks.md), and the kernel, which serialises link changes anyway,
// finishes the two hundred no later.
//
// Why starts are paced: the synchronous start of an attach (validation done, the namespace opened,
// addresses taken, the plan made, the netlink thread and the store handed their work) is a few hundred
// microseconds of the event loop. When a store commit finishes a dozen attaches at once, a freed slot
// that started the next waiter right there would run the dozen starts in the same turn as the dozen
// answers. So at most `startsPerTurn` attaches start in one turn of the event loop; the others start
// in the next turns, after timers and I/O (Status among them) have had theirs.

import { exhausted } from '../errors';

/** Attaches started in one event-loop turn, at most. */
export const STARTS_PER_TURN = 4;

export class Admission {
  private admitted = 0;
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  private startedThisTurn = 0;
  private turnEndScheduled = false;

  constructor(
    private readonly maxInFlight: number,
    private readonly concurrency: number,
    private readonly startsPerTurn = STARTS_PER_TURN,
  ) {
    for (const [what, v] of [
      ['concurrency', concurrency],
      ['startsPerTurn', startsPerTurn],
    ] as const) {
      if (!Number.isInteger(v) || v < 1) throw new RangeError(`${what} must be a positive integer, not ${v}`);
    }
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.admitted >= this.maxInFlight) {
      throw exhausted(`too many Attach calls in flight (${this.maxInFlight}); retry shortly`);
    }
    this.admitted++;
    try {
      // Those already waiting go first.
      if (this.waiting.length === 0 && this.running < this.concurrency && this.ticket()) this.running++;
      else await new Promise<void>((resolve) => this.waiting.push(resolve));
      try {
        return await fn();
      } finally {
        this.running--;
        this.pump();
      }
    } finally {
      this.admitted--;
    }
  }

  /** Starts waiters while a slot and this turn's starts allow. */
  private pump(): void {
    while (this.waiting.length > 0 && this.running < this.concurrency && this.ticket()) {
      this.running++;
      this.waiting.shift()?.();
    }
  }

  /** One start in the current turn, if any is left; the turn ends (and pump resumes) in setImmediate. */
  private ticket(): boolean {
    if (this.startedThisTurn >= this.startsPerTurn) return false;
    this.startedThisTurn++;
    if (!this.turnEndScheduled) {
      this.turnEndScheduled = true;
      setImmediate(() => {
        this.turnEndScheduled = false;
        this.startedThisTurn = 0;
        this.pump();
      });
    }
    return true;
  }
}
