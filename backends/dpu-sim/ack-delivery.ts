import type { Logger } from 'pino';
import type { Ack, AgentMessage } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FaultInjector } from './fault-injection';

// When an ack may leave: after the acks before it, once its change is kept (in the state file), late by
// the injected ack latency; and the crash fault, which ends the process right after an ack left.

export interface AckDeliveryOptions {
  /** Resolves once every change so far would survive a restart of this boot. */
  kept: () => Promise<void>;
  faults: FaultInjector;
  /** Exits the process (the crash fault); the caller flushes state first. */
  crash: () => void;
  log: Logger;
}

export type Send = (m: AgentMessage, flushed?: boolean) => Promise<void>;

export class AckDelivery {
  /** The crash fault fired: the process is exiting, and handles nothing more meanwhile. */
  crashing = false;

  constructor(private readonly opts: AckDeliveryOptions) {}

  /**
   * Sends `ack` (or a batch's acks, in order) after the acks before it (`prev`), once its change is
   * kept: an agent killed before its state file holds a change must not have acked it, or a restart of
   * the same boot would bring back a port whose Delete the daemon already counts as done. Waiting holds
   * up this ack, not the next change. `crash`: the process exits right after the (last) ack.
   */
  after(
    prev: Promise<void>,
    send: Send,
    ack: Ack | Ack[],
    crash = this.opts.faults.shouldCrash(),
  ): Promise<void> {
    const list = Array.isArray(ack) ? ack : [ack];
    const last = list.at(-1);
    if (!last) return prev;
    const kept = this.opts.kept();
    const deliver = async (): Promise<void> => {
      for (const a of list) if (a !== last) void send({ ack: a });
      await send({ ack: last }, crash);
      if (crash) {
        this.opts.log.warn({ port: last.name }, 'fault injection: crashing after acking a change');
        this.crashing = true;
        this.opts.crash();
      }
    };
    const delay = this.opts.faults.ackLatencyMs;
    return Promise.all([prev, kept]).then(() => {
      // Latency delays the ack, not the next change: a slow agent still works through its queue.
      if (delay > 0) setTimeout(() => void deliver(), delay);
      else return deliver();
      return undefined;
    });
  }
}
