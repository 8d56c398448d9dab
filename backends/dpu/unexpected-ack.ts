import { LogRate } from '../../lib/log-rate';
import type { Logger } from '../../core/logger';
import type { Ack } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentSession } from './agent-session';

// Acks that match nothing the daemon waits for. One for a replaced generation is normal (an object
// changed while its ack was on its way) and logged quietly; one for an unknown object or a generation
// never sent is not, and is logged as a warning, throttled: an agent can send any number of them.

export class UnexpectedAcks {
  private readonly logRate = new LogRate();

  constructor(private readonly log: Logger) {}

  /** `newest`: the object's current generation (or its tombstone's), if it is known at all. */
  report(s: AgentSession, ack: Ack, newest: number | undefined, what = 'port'): void {
    const field = what === 'port' ? 'port' : 'object';
    if (newest !== undefined && ack.generation < newest) {
      this.log.debug({ [field]: ack.name, generation: ack.generation, current: newest }, 'stale ack ignored');
      return;
    }
    const n = this.logRate.occurrence('unexpected-ack');
    if (n === undefined) return;
    this.log.warn(
      { agentId: s.agentId, [field]: ack.name.slice(0, 256), generation: ack.generation, occurrences: n },
      newest === undefined
        ? `ack for a ${what} this daemon does not know; ignored`
        : 'ack for a generation never sent; ignored',
    );
  }
}
