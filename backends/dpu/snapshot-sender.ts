import type { Logger } from '../../core/logger';
import type { PolicyObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentLink } from './agent-link';
import type { AgentSession } from './agent-session';
import type { AgentSyncState } from './agent-sync-state';
import type { DesiredState } from './desired-state';
import { hostPortFirst } from './host-port-first';
import { SnapshotSync } from './snapshot-sync';

// How an agent is sent its snapshot. With ports and fabric objects both to list, the ports go first in
// a snapshot of their own (its fabric kept as it is), and the whole snapshot follows once they are
// acked and their host ends re-plumbed: behind 10,000 fabric objects, the agent would program a
// rebooted DPU's VFs, and the daemon move them back, only after it got through all of them, while
// every packet to a workload waits. Within the ports, the host port goes first (host-port-first.ts).

/**
 * How long the whole snapshot waits, behind a snapshot of the ports, for their host ends to be
 * re-plumbed: a move stuck in a namespace must not hold the fabric back for long.
 */
const FABRIC_AFTER_REPLUMB_MAX_MS = 2000;

export interface SnapshotSenderDeps {
  link: AgentLink;
  desired: DesiredState;
  ackTimeoutMs: number;
  log: Logger;
  /** Whether this agent's snapshots keep the ports they do not list (a store still new to it). */
  keepsUnlisted(agentId: string): boolean;
  /** Sends a Delete the snapshot does not carry (a port this daemon removed while snapshots keep them). */
  sendDelete(agentId: string, name: string, generation: number, reason: string): void;
  /** Re-plumbs the agent's re-created host ends; never fails. */
  replumb(agentId: string): Promise<void>;
  /** The agent applied a whole snapshot (its ports and fabric objects). */
  synced(agentId: string): void;
  /**
   * From version 4, the agent's policy objects, listed before its ports in every snapshot so that a
   * port never carries traffic without its rules; `keepUnlisted` while the policy is not known yet.
   */
  policySnapshot?(s: AgentSession): { objects: PolicyObject[]; keepUnlisted: boolean };
}

export class SnapshotSender {
  private epoch = 0;

  constructor(private readonly deps: SnapshotSenderDeps) {}

  /** Sends `s` its snapshot: the ports first when fabric objects are to follow. */
  send(s: AgentSession, st: AgentSyncState): void {
    const portsFirst =
      st.carriage.carries && st.fabric.size > 0 && this.deps.desired.snapshot(s.agentId).length > 0;
    this.sendOf(s, st, { fabric: !portsFirst, keepUnlisted: this.deps.keepsUnlisted(s.agentId) });
  }

  /**
   * A snapshot was applied (its last object acked or superseded): a snapshot of the ports has the
   * whole one follow; a whole one reports the agent synced.
   */
  finished(st: AgentSyncState, sync: SnapshotSync): void {
    if (sync.fabricFollows) {
      this.deps.log.info(
        { agentId: st.agentId, epoch: sync.epoch, ms: sync.durationMs, failed: sync.failed.length },
        'ports of the snapshot applied; the whole snapshot follows once their host ends are re-plumbed',
      );
      // The fabric objects' acks would compete with the moves for this process and the agent.
      const replumbed = this.deps.replumb(st.agentId);
      const cap = new Promise<void>((r) => setTimeout(r, FABRIC_AFTER_REPLUMB_MAX_MS).unref());
      void Promise.race([replumbed, cap]).then(() => this.followWithFabric(st, sync));
      return;
    }
    st.lastSyncMs = sync.durationMs;
    this.deps.log.info(
      { agentId: st.agentId, epoch: sync.epoch, ms: st.lastSyncMs, failed: sync.failed.length },
      sync.failed.length ? 'snapshot applied with failures' : 'snapshot applied',
    );
    this.deps.synced(st.agentId);
    void this.deps.replumb(st.agentId);
  }

  private sendOf(
    s: AgentSession,
    st: AgentSyncState,
    o: { fabric: boolean; keepUnlisted: boolean; follows?: SnapshotSync },
  ): void {
    const ports = hostPortFirst(this.deps.desired.snapshot(s.agentId), (p) => p.name);
    const fabric = o.fabric && st.carriage.carries ? st.fabric.snapshot() : [];
    this.epoch += 1;
    const sync = new SnapshotSync(s.id, this.epoch, ports, fabric, {
      fabricFollows: !o.fabric,
      keepUnlisted: o.keepUnlisted,
      startedAt: o.follows?.startedAt,
    });
    st.sync?.abandon();
    st.sync = sync;
    // Until the fabric planned this agent's objects (after the first apply of a full peer table), the
    // agent keeps whatever fabric it holds: an empty list then means "not known yet", not "none". A
    // snapshot of the ports alone keeps it too: the whole snapshot follows.
    const keepUnlistedFabric = !st.fabric.planned || !o.fabric;
    const policy = this.deps.policySnapshot?.(s) ?? { objects: [], keepUnlisted: true };
    s.send({
      snapshotBegin: {
        epoch: sync.epoch,
        keepUnlisted: o.keepUnlisted,
        keepUnlistedFabric,
        keepUnlistedPolicy: policy.keepUnlisted,
      },
    });
    for (const object of policy.objects) s.send({ upsert: { policy: object } });
    for (const port of ports) s.send({ upsert: { port } });
    for (const object of fabric) s.send({ upsert: { fabric: object } });
    s.send({
      syncComplete: {
        epoch: sync.epoch,
        portCount: ports.length,
        fabricCount: fabric.length,
        policyCount: policy.objects.length,
      },
    });
    // The snapshot keeps what it does not list; what this daemon removed must still go (once).
    if (!o.follows) {
      for (const [name, generation] of st.unconfirmedDeletes) {
        if (this.deps.desired.get(name)?.agentId === s.agentId) continue;
        this.deps.sendDelete(s.agentId, name, generation, 'removed while the agent was away');
      }
    }
    this.deps.log.info(
      {
        agentId: s.agentId,
        epoch: sync.epoch,
        ports: ports.length,
        fabric: fabric.length,
        keepUnlisted: o.keepUnlisted,
        keepUnlistedFabric,
        ...(o.fabric ? {} : { fabricFollows: st.fabric.size }),
      },
      o.fabric
        ? 'snapshot sent'
        : 'snapshot of the ports sent; the whole snapshot follows once they are acked',
    );
    if (sync.complete) this.finished(st, sync);
    // An agent that never acks a port still gets its fabric, after the ack timeout.
    else if (!o.fabric) setTimeout(() => this.followWithFabric(st, sync), this.deps.ackTimeoutMs).unref();
  }

  /** The whole snapshot behind a snapshot of the ports, unless a newer one (or the session's end) took over. */
  private followWithFabric(st: AgentSyncState, lead: SnapshotSync): void {
    const s = this.deps.link.sessionOf(st.agentId);
    if (st.sync !== lead || s?.id !== lead.sessionId) return;
    this.sendOf(s, st, { fabric: true, keepUnlisted: lead.keepUnlisted, follows: lead });
  }
}
