import { deadlineExceeded, type WorkloadNetError } from '../../core/errors';
import type { Ack } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// Attach and Detach wait here for the agent's ack of one port at one generation. Waiters are tied to
// the session the change was sent on: when that stream ends, its waiters fail at once instead of
// running into their deadline, because the change may never have reached the agent.

interface Waiter {
  generation: number;
  sessionId: string;
  resolve: (ack: Ack) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** How an incoming ack related to what was being waited for. */
export type AckMatch = 'matched' | 'stale' | 'not-waiting';

export class AckWaiter {
  private readonly waiting = new Map<string, Waiter>();

  /**
   * Resolves with the ack for `name` at exactly `generation`, or rejects with DEADLINE_EXCEEDED after
   * `timeoutMs`. `what` describes the change for the timeout message ("agent dpu-1 … port a/eth0").
   */
  wait(name: string, generation: number, sessionId: string, timeoutMs: number, what: string): Promise<Ack> {
    // The core never runs two calls for one key at once, so an older waiter here belongs to a call that
    // already gave up; it can only be superseded.
    this.waiting
      .get(name)
      ?.reject(deadlineExceeded(`${what}: superseded by a newer change of the same port`));
    return new Promise<Ack>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.waiting.get(name) === waiter) this.waiting.delete(name);
        reject(
          deadlineExceeded(
            `${what} was not acknowledged within ${timeoutMs} ms; the agent may be overloaded or stuck (raise dpu.ackTimeoutMs if it is just slow)`,
          ),
        );
      }, timeoutMs);
      const waiter: Waiter = {
        generation,
        sessionId,
        resolve: (ack) => {
          clearTimeout(timer);
          resolve(ack);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
        timer,
      };
      this.waiting.set(name, waiter);
    });
  }

  /** Hands an ack to its waiter. Acks for older generations are reported as stale and dropped. */
  deliver(ack: Ack, sessionId: string): AckMatch {
    const w = this.waiting.get(ack.name);
    if (!w || w.sessionId !== sessionId) return 'not-waiting';
    if (ack.generation < w.generation) return 'stale';
    if (ack.generation !== w.generation) return 'not-waiting';
    this.waiting.delete(ack.name);
    w.resolve(ack);
    return 'matched';
  }

  /** Fails every waiter of a session that ended; `err` builds the error per port name. */
  failSession(sessionId: string, err: (name: string) => WorkloadNetError): number {
    let n = 0;
    for (const [name, w] of [...this.waiting]) {
      if (w.sessionId !== sessionId) continue;
      this.waiting.delete(name);
      w.reject(err(name));
      n++;
    }
    return n;
  }

  /** Stops waiting for a port without failing anyone who is not waiting any more. */
  cancel(name: string, err: WorkloadNetError): void {
    const w = this.waiting.get(name);
    if (!w) return;
    this.waiting.delete(name);
    w.reject(err);
  }

  isWaiting(name: string): boolean {
    return this.waiting.has(name);
  }

  get pending(): number {
    return this.waiting.size;
  }
}
