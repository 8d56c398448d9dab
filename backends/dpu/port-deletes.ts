import { asWorkloadNetError } from '../../core/errors';
import type { Logger } from '../../core/logger';
import { AckCode, ObjectKind } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { nackError } from './ack-code';
import type { AckWaiter } from './ack-waiter';
import type { AgentLink } from './agent-link';
import type { AgentSyncState } from './agent-sync-state';
import type { DesiredState } from './desired-state';

// Taking a port off its agent: it leaves the desired state, and its agent is sent a Delete that is kept
// outstanding (a tombstone) until its ack, and, while the store cannot vouch for what it lists, kept
// until confirmed. Detach waits for the ack of a healthy agent only; a failure path's rollback does not
// wait at all. Its own file: when to wait, and for whom, is a question of its own, apart from how the
// ports' upserts and acks are kept in step (agent-sync.ts).

export interface PortDeletesDeps {
  link: AgentLink;
  desired: DesiredState;
  acks: AckWaiter;
  ackTimeoutMs: number;
  log: Logger;
  /** Whether the agent's snapshots keep the ports they do not list (keep-unlisted.ts). */
  keepsUnlisted(agentId: string): boolean;
  /** The agent's tracked exchange, made on first use. */
  stateOf(agentId: string): AgentSyncState;
  /** A newer change of a port replaces its entry in its agent's snapshot. */
  supersede(name: string, agentId: string): void;
}

export class PortDeletes {
  constructor(private readonly deps: PortDeletesDeps) {}

  /** Drops a port from desired state and tells the agent without waiting (the failure paths' rollback). */
  forget(key: string, agentId: string, reason: string): void {
    const st = this.deps.stateOf(agentId);
    const gen = this.deps.desired.delete(key) ?? this.deps.desired.tombstoneGeneration();
    this.deps.supersede(key, agentId);
    if (this.deps.keepsUnlisted(agentId)) st.unconfirmedDeletes.set(key, gen);
    this.send(agentId, key, gen, reason);
  }

  /**
   * Drops a port from desired state (Detach, or an Attach failing after its agent programmed the port)
   * and has its agent delete it, waiting for the ack from a healthy agent only, so that the caller
   * returns once the port's netdevs are gone. Never fails.
   */
  async remove(key: string, agentId: string, reason = ''): Promise<void> {
    const { desired, link, acks, ackTimeoutMs, log } = this.deps;
    const gen = desired.delete(key);
    this.deps.supersede(key, agentId);
    const st = this.deps.stateOf(agentId);
    if (gen !== undefined && this.deps.keepsUnlisted(agentId)) st.unconfirmedDeletes.set(key, gen);
    const s = link.sessionOf(agentId);
    if (gen !== undefined && s && !s.healthy) {
      // A session gone quiet may still be alive, and may already hold its snapshot (with this port):
      // tell it now rather than leave the port there until the next snapshot. Waiting for its ack
      // would only hold Detach for the ack timeout.
      this.send(agentId, key, gen, reason || 'detached');
      log.info(
        { port: key, agentId },
        'port removed while its DPU agent is silent; told it without waiting for the ack',
      );
    } else if (gen !== undefined && s) {
      const who = `deletion of port ${key} (generation ${gen}) on DPU agent ${s.agentId}`;
      try {
        const acked = acks.wait(key, gen, s.id, ackTimeoutMs, who);
        this.send(agentId, key, gen, reason);
        const ack = await acked;
        if (ack.code !== AckCode.ACK_CODE_OK) throw nackError(ack, who);
      } catch (err) {
        // The port is no longer desired, so the next snapshot removes it whatever happened here:
        // failing Detach would only keep the workload's addresses from being released.
        log.warn(
          { port: key, err: asWorkloadNetError(err).message },
          'agent did not confirm a deletion; the next snapshot removes it',
        );
      }
    } else if (gen !== undefined) {
      log.info(
        { port: key, agentId },
        'port removed while its DPU agent is away; its next snapshot removes it',
      );
    }
  }

  /**
   * Sends a Delete to the agent's current session and keeps it as outstanding until its ack; nothing is
   * kept when the agent holds no session or its stream is over, since its next snapshot settles the port.
   * The current session need not be the one a caller last saw: a session that took over in the same turn
   * of the event loop (a hello replacing a silent one) was sent its snapshot while the port was still
   * desired.
   */
  send(agentId: string, name: string, generation: number, reason: string): void {
    if (
      this.deps.link
        .sessionOf(agentId)
        ?.send({ delete: { name, generation, reason, kind: ObjectKind.OBJECT_KIND_PORT } })
    )
      this.deps.stateOf(agentId).tombstones.set(name, generation);
  }
}
