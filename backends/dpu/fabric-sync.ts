import { LogRate } from '../../lib/log-rate';
import type { Logger } from '../../core/logger';
import { AckCode, ObjectKind, type Ack, type PeerStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { ackCodeName } from './ack-code';
import type { AgentLink } from './agent-link';
import type { AgentSession } from './agent-session';
import type { AgentSyncState } from './agent-sync-state';
import type { DesiredState } from './desired-state';
import type { FabricBody } from './fabric-plan';
import type { SnapshotSync } from './snapshot-sync';
import type { UnexpectedAcks } from './unexpected-ack';

// An agent's fabric objects between its snapshots (protocol version 3): a changed plan is sent as
// single upserts and Deletes, what the agent refused goes again once what held it back may be gone,
// and its acks (by kind, name and generation) and its PeerStatus are taken only while it carries the
// fabric. Its own file: the ports' exchange (agent-sync.ts) and this one share the agent's state and
// snapshot, nothing else; each object kind is sent and acked by its own rules.

export interface FabricSyncDeps {
  link: AgentLink;
  desired: DesiredState;
  log: Logger;
  /** Acks that match nothing (shared with the ports: one count of them per daemon). */
  unexpected: UnexpectedAcks;
  /** The agent's tracked exchange, made on first use. */
  stateOf(agentId: string): AgentSyncState;
  /** A newer change of an object replaces its entry in its agent's snapshot. */
  supersede(name: string, agentId: string, kind: ObjectKind): void;
  /** A snapshot was applied (its last object acked or superseded). */
  finished(st: AgentSyncState, sync: SnapshotSync): void;
}

export class FabricSync {
  private readonly logRate = new LogRate();

  constructor(private readonly deps: FabricSyncDeps) {}

  /**
   * Makes `plan` the fabric `agentId` should hold: changed objects get a new generation and go to its
   * session now, removed ones a Delete. An agent away (or whose snapshot is still to come) gets them in
   * its next snapshot. Returns how many objects changed.
   */
  set(agentId: string, plan: ReadonlyMap<string, FabricBody>): number {
    const st = this.deps.stateOf(agentId);
    const changes = st.fabric.set(plan, () => this.deps.desired.nextGeneration());
    // Only a session that already got its snapshot hears single changes: one still waiting for it (not
    // primed yet, or being established right now) gets them listed in the snapshot.
    const current = st.carriage.carries ? this.deps.link.sessionOf(agentId) : undefined;
    const s = current && st.sync?.sessionId === current.id ? current : undefined;
    for (const object of changes.upserts) {
      st.fabricTombstones.delete(object.name);
      this.deps.supersede(object.name, agentId, ObjectKind.OBJECT_KIND_FABRIC);
      s?.send({ upsert: { fabric: object } });
    }
    for (const { name, generation } of changes.deletes) {
      this.deps.supersede(name, agentId, ObjectKind.OBJECT_KIND_FABRIC);
      const reason = 'no longer in the peer table';
      if (s?.send({ delete: { name, generation, reason, kind: ObjectKind.OBJECT_KIND_FABRIC } }))
        st.fabricTombstones.set(name, generation);
    }
    // What the agent refused for another object's sake (an FDB entry it holds for another endpoint)
    // goes again right behind a change that may have freed it: the agent takes messages in order.
    if (s && changes.deletes.length + changes.replaced > 0) {
      const again = st.fabric.renewRefused(() => this.deps.desired.nextGeneration());
      for (const object of again) {
        this.deps.supersede(object.name, agentId, ObjectKind.OBJECT_KIND_FABRIC);
        s.send({ upsert: { fabric: object } });
      }
      if (again.length > 0)
        this.deps.log.info(
          { agentId, objects: again.length, first: again[0]?.name },
          'fabric objects the agent refused sent again: what held them back may be gone',
        );
    }
    return changes.upserts.length + changes.deletes.length;
  }

  ack(s: AgentSession, ack: Ack): void {
    const st = this.deps.stateOf(s.agentId);
    const ok = ack.code === AckCode.ACK_CODE_OK;
    // An agent that does not carry the fabric was sent none: whatever it acks is unknown to it.
    const current = st.carriage.carries ? st.fabric.get(ack.name) : undefined;
    if (current && current.generation === ack.generation) {
      st.fabric.recordAck(ack.name, { generation: ack.generation, ok, message: ack.message });
      const sync = st.sync;
      if (sync?.sessionId === s.id && sync.ack(ack.name, ack.generation, ok, ObjectKind.OBJECT_KIND_FABRIC))
        this.deps.finished(st, sync);
      if (!ok) {
        const n = this.logRate.occurrence('fabric-nack');
        if (n !== undefined)
          this.deps.log.warn(
            {
              agentId: s.agentId,
              object: ack.name,
              generation: ack.generation,
              code: ackCodeName(ack.code),
              message: ack.message,
              occurrences: n,
            },
            'agent could not program a fabric object',
          );
      }
    } else if (!current && st.fabricTombstones.get(ack.name) === ack.generation) {
      st.fabricTombstones.delete(ack.name);
    } else {
      this.deps.unexpected.report(
        s,
        ack,
        current?.generation ?? st.fabricTombstones.get(ack.name),
        'fabric object',
      );
    }
  }

  /** How the agent sees its peers: taken only from an agent that carries the fabric. */
  peerStatus(s: AgentSession, ps: PeerStatus): void {
    const st = this.deps.stateOf(s.agentId);
    if (!st.carriage.carries) {
      const n = this.logRate.occurrence('peer-status');
      if (n !== undefined)
        this.deps.log.warn(
          { agentId: s.agentId, occurrences: n },
          'peer status from an agent that does not carry the fabric; ignored',
        );
      return;
    }
    st.peers.apply(ps);
  }
}
