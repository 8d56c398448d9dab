import { unavailable } from '../../core/errors';
import { LogRate } from '../../lib/log-rate';
import type { Logger } from '../../core/logger';
import {
  AckCode,
  ObjectKind,
  PortOperState,
  type Ack,
  type PeerStatus,
  type Port,
  type PortStatus,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { ackCodeName } from './ack-code';
import { AckEndpoints } from './ack-endpoint';
import type { AckWaiter } from './ack-waiter';
import type { AgentLink, LinkEvents, LostAgent } from './agent-link';
import type { AgentSession } from './agent-session';
import { AgentSyncState } from './agent-sync-state';
import type { DesiredState } from './desired-state';
import { fabricCarriage, type FabricCarriage } from './fabric-carriage';
import type { FabricBody } from './fabric-plan';
import { FabricSync } from './fabric-sync';
import { PortDeletes } from './port-deletes';
import type { PortFields } from './port-spec';
import { SnapshotSender, type SnapshotSenderDeps } from './snapshot-sender';
import { UnexpectedAcks } from './unexpected-ack';

// Keeps each agent's ports in step with the desired state: a snapshot of its ports on every session it
// opens, single changes in between, Deletes until they are confirmed (port-deletes.ts), and what its
// acks and port statuses say of each port. This is all that the backend hears from its agents (the link's events);
// the Backend verbs change the desired state and hand their changes here. From version 3 the same goes
// for each agent's fabric objects (setFabric): listed in every snapshot, sent singly in between, acked
// by (kind, name, generation); fabric-sync.ts does that part.

export interface AgentSyncDeps extends Pick<SnapshotSenderDeps, 'policySnapshot'> {
  link: AgentLink;
  desired: DesiredState;
  acks: AckWaiter;
  ackTimeoutMs: number;
  log: Logger;
  /**
   * Runs, unawaited, as each port of a snapshot is acked and once a snapshot's ports are applied: a
   * rebooted DPU's VFs go back into their workloads (endpoint-replumb.ts; close calls share a pass).
   */
  replumb(agentId: string): Promise<void>;
  /** Runs, unawaited, once the agent has applied a whole snapshot (its ports and fabric objects). */
  synced(agentId: string): void;
  /**
   * Whether the agent's snapshots keep the ports they do not list: the store cannot vouch yet that
   * what it lists is all there is on that agent (keep-unlisted.ts). Asked per agent, per snapshot.
   */
  keepsUnlisted(agentId: string): boolean;
  /**
   * Runs when an agent's session is established, before its snapshot is built: the fabric plans the
   * agent's objects (and its neighbours' objects for it) so that the snapshot lists them.
   */
  established?(session: AgentSession): void;
}

export class AgentSync implements LinkEvents {
  /** Per agent id: its snapshot in flight and its outstanding Deletes. */
  private readonly states = new Map<string, AgentSyncState>();
  private readonly logRate = new LogRate();
  private isPrimed = false;
  private removedByAgents = 0;
  /** What each port ack leaves recorded as its endpoint (ack-endpoint.ts). */
  private readonly endpoints: AckEndpoints;
  private readonly unexpected: UnexpectedAcks;
  private readonly snapshots: SnapshotSender;
  /** Deletes on their way to each agent, kept until their acks. */
  private readonly deletes: PortDeletes;
  /** Each agent's fabric objects between snapshots, their acks and its PeerStatus. */
  private readonly fabric: FabricSync;

  constructor(private readonly deps: AgentSyncDeps) {
    this.endpoints = new AckEndpoints(deps.log);
    this.unexpected = new UnexpectedAcks(deps.log);
    this.deletes = new PortDeletes({
      ...deps,
      stateOf: (agentId) => this.stateOf(agentId),
      supersede: (name, agentId) => this.supersede(name, agentId),
    });
    this.snapshots = new SnapshotSender({
      ...deps,
      sendDelete: (agentId, name, generation, reason) => this.deletes.send(agentId, name, generation, reason),
      replumb: (agentId) => this.replumb(agentId),
    });
    this.fabric = new FabricSync({
      ...deps,
      unexpected: this.unexpected,
      stateOf: (agentId) => this.stateOf(agentId),
      supersede: (name, agentId, kind) => this.supersede(name, agentId, kind),
      finished: (st, sync) => this.snapshots.finished(st, sync),
    });
  }

  /** Whether the current (or last) snapshot of some agent kept the ports it did not list (Status). */
  get keepUnlisted(): boolean {
    for (const st of this.states.values()) if (st.sync?.keepUnlisted) return true;
    return false;
  }

  /** Set once reconcile has restored the stored ports: before that a snapshot would wipe the agent. */
  get primed(): boolean {
    return this.isPrimed;
  }

  /** Ports that agents removed as not desired (their PortStatus REMOVED). */
  get agentRemovedPorts(): number {
    return this.removedByAgents;
  }

  get refusedEndpointChanges(): number {
    return this.endpoints.refused;
  }

  /** What is tracked of an agent's exchange, if anything is. */
  state(agentId: string): AgentSyncState | undefined {
    return this.states.get(agentId);
  }

  /** Every agent's exchange tracked since start-up. */
  allStates(): IterableIterator<AgentSyncState> {
    return this.states.values();
  }

  /**
   * The stored ports are restored: from now on every session gets its snapshot, starting with the
   * sessions open now, which are returned.
   */
  prime(): AgentSession[] {
    this.isPrimed = true;
    const sessions = this.deps.link.sessions();
    for (const s of sessions) this.snapshots.send(s, this.stateOf(s.agentId));
    return sessions;
  }

  /**
   * Waits until each of `sessions` confirmed its snapshot, at most the ack timeout, adding a warning for
   * each one that did not and for each port it could not re-program.
   */
  async awaitSnapshots(sessions: AgentSession[], warnings: string[]): Promise<void> {
    const { ackTimeoutMs } = this.deps;
    await Promise.all(
      sessions.map(async (s) => {
        const sync = this.states.get(s.agentId)?.sync;
        if (sync?.sessionId !== s.id) return;
        const timedOut = await Promise.race([
          sync.done.then(() => false),
          new Promise<boolean>((r) => setTimeout(() => r(true), ackTimeoutMs).unref()),
        ]);
        if (timedOut)
          warnings.push(`DPU agent ${s.agentId} did not confirm the snapshot within ${ackTimeoutMs} ms`);
        for (const name of sync.failed)
          warnings.push(`${name}: DPU agent ${s.agentId} could not re-program the port`);
      }),
    );
  }

  /**
   * Makes a port desired on `agentId` at a new generation: Deletes of it still outstanding no longer
   * count, and a snapshot in flight stops waiting for its older generation.
   */
  upsert(fields: PortFields, agentId: string): Port {
    const st = this.stateOf(agentId);
    const port = this.deps.desired.upsert(fields, agentId);
    st.tombstones.delete(fields.name);
    st.unconfirmedDeletes.delete(fields.name);
    this.supersede(fields.name, agentId);
    return port;
  }

  /**
   * A port that stays where it is at a new generation (desired-state.ts change()), with what upsert()
   * also does for it. Undefined when the port is not desired.
   */
  change(fields: PortFields, agentId: string): Port | undefined {
    const port = this.deps.desired.change(fields);
    if (!port) return undefined;
    const st = this.stateOf(agentId);
    st.tombstones.delete(fields.name);
    st.unconfirmedDeletes.delete(fields.name);
    this.supersede(fields.name, agentId);
    return port;
  }

  /** Drops a port from desired state and tells the agent without waiting (the failure paths' rollback). */
  forget(key: string, agentId: string, reason: string): void {
    this.deletes.forget(key, agentId, reason);
  }

  /**
   * Drops a port from desired state (Detach, or an Attach failing after its agent programmed the port)
   * and has its agent delete it (port-deletes.ts). Never fails.
   */
  remove(key: string, agentId: string, reason = ''): Promise<void> {
    return this.deletes.remove(key, agentId, reason);
  }

  // ---- what the agent link reports -----------------------------------------------------------

  established(s: AgentSession, prev: LostAgent | undefined): void {
    const st = this.stateOf(s.agentId);
    st.version = s.version;
    // A new session reports its inventory and its peers afresh; a version 1 agent has none.
    st.inventory = undefined;
    st.peers.clear();
    st.fabric.clearAcks();
    st.carriage = fabricCarriage(s.version, s.hello);
    this.deps.established?.(s);
    if (prev && prev.agentId === s.agentId && prev.bootId !== s.bootId) {
      this.deps.log.info(
        { agentId: s.agentId, oldBootId: prev.bootId, bootId: s.bootId, ports: this.deps.desired.size },
        'agent restarted with a new boot id (its state is gone); the snapshot re-programs every port',
      );
    }
    if (this.isPrimed) {
      this.snapshots.send(s, this.stateOf(s.agentId));
    } else {
      this.deps.log.info(
        { agentId: s.agentId },
        'agent connected before the start-up reconcile; its snapshot waits for it',
      );
    }
  }

  lost(s: AgentSession, reason: string): void {
    // Acks can only arrive on the session that got the change; the next snapshot settles the rest.
    const st = this.stateOf(s.agentId);
    st.tombstones.clear();
    st.fabricTombstones.clear();
    this.deps.desired.clearOperStates(s.agentId);
    st.sync?.abandon();
    st.sync = undefined;
    const failed = this.deps.acks.failSession(s.id, (name) =>
      unavailable(
        `the stream to DPU agent ${s.agentId} ended while waiting for port ${name} (${reason}); retry once the agent is back`,
      ),
    );
    if (failed > 0) {
      this.deps.log.warn({ agentId: s.agentId, failed }, 'in-flight port changes failed: agent stream ended');
    }
  }

  /** The agent's ports only: each agent holds what was placed on it. */
  inventory(s: AgentSession): void {
    const inv = s.inventory;
    if (!inv) return;
    this.stateOf(s.agentId).inventory = inv;
    this.deps.log.info(
      {
        agentId: s.agentId,
        pfs: inv.pfs.map((pf) => `${pf.name}:${pf.linkState}`).join(','),
        vfTotal: inv.vfTotal,
        vfFree: inv.vfFree,
        firmware: inv.firmwareVersion,
      },
      'agent inventory',
    );
  }

  ack(s: AgentSession, ack: Ack): void {
    if (ack.kind === ObjectKind.OBJECT_KIND_FABRIC) {
      this.fabric.ack(s, ack);
      return;
    }
    const st = this.stateOf(s.agentId);
    // A port placed on another agent is none of this agent's business.
    const placed = this.deps.desired.get(ack.name);
    const entry = placed?.agentId === s.agentId ? placed : undefined;
    const tomb = st.tombstones.get(ack.name);
    const ok = ack.code === AckCode.ACK_CODE_OK;
    if (entry && entry.port.generation === ack.generation) {
      const endpoint = this.endpoints.of(s, entry, ack);
      if (endpoint === 'refused') {
        const sync = st.sync;
        if (sync?.sessionId === s.id && sync.ack(ack.name, ack.generation, false))
          this.snapshots.finished(st, sync);
        return;
      }
      this.deps.desired.recordAck(ack.name, {
        generation: ack.generation,
        ok,
        message: ack.message,
        endpoint: endpoint.endpoint,
        bootId: endpoint.bootId,
      });
      const sync = st.sync?.sessionId === s.id ? st.sync : undefined;
      const listed = sync?.awaits(ack.name, ack.generation) === true;
      if (sync && listed && sync.ack(ack.name, ack.generation, ok)) this.snapshots.finished(st, sync);
      // A port of the snapshot is re-plumbed on its own ack, not after the whole snapshot: behind it
      // may come thousands of fabric objects, and a rebooted DPU's VF waits in the host meanwhile.
      else if (listed && ok && endpoint.endpoint?.netdev) void this.replumb(st.agentId);
      if (!ok && !this.deps.acks.isWaiting(ack.name)) {
        this.deps.log.warn(
          {
            agentId: s.agentId,
            port: ack.name,
            generation: ack.generation,
            code: ackCodeName(ack.code),
            message: ack.message,
          },
          'agent could not program a port',
        );
      }
    } else if (!entry && tomb === ack.generation) {
      st.tombstones.delete(ack.name);
      if (ack.code === AckCode.ACK_CODE_OK && st.unconfirmedDeletes.get(ack.name) === ack.generation)
        st.unconfirmedDeletes.delete(ack.name);
    } else {
      this.unexpected.report(s, ack, entry?.port.generation ?? tomb);
    }
    // A waiter only ever takes its exact generation (matched above as current or tombstone).
    this.deps.acks.deliver(ack, s.id);
  }

  portStatus(s: AgentSession, ps: PortStatus): void {
    switch (ps.operState) {
      case PortOperState.PORT_OPER_STATE_REMOVED:
        this.removedByAgents += 1;
        this.deps.log.info(
          { agentId: s.agentId, port: ps.name.slice(0, 256), message: ps.message },
          'agent removed a port that is not desired',
        );
        return;
      case PortOperState.PORT_OPER_STATE_UP:
      case PortOperState.PORT_OPER_STATE_DOWN: {
        const state = ps.operState === PortOperState.PORT_OPER_STATE_UP ? 'up' : 'down';
        if (this.deps.desired.setOperState(ps.name, state, s.agentId)) {
          this.deps.log.info({ port: ps.name, state, message: ps.message }, 'port state changed');
          return;
        }
        const n = this.logRate.occurrence('unknown-status');
        if (n !== undefined) {
          this.deps.log.warn(
            { port: ps.name.slice(0, 256), occurrences: n },
            'status for a port this daemon does not know; ignored',
          );
        }
        return;
      }
      default:
        this.deps.log.debug({ port: ps.name.slice(0, 256) }, 'port status without a known state ignored');
    }
  }

  peerStatus(s: AgentSession, ps: PeerStatus): void {
    this.fabric.peerStatus(s, ps);
  }

  // ---- the fabric ----------------------------------------------------------------------------

  /**
   * Whether the agent carries the fabric, as the fabric decided (a hello may state an endpoint another
   * holds): objects are sent, and acks taken, only while it does.
   */
  setCarriage(agentId: string, carriage: FabricCarriage): void {
    this.stateOf(agentId).carriage = carriage;
  }

  /**
   * Makes `plan` the fabric `agentId` should hold (fabric-sync.ts); an agent away (or whose snapshot
   * is still to come) gets it in its next snapshot. Returns how many objects changed.
   */
  setFabric(agentId: string, plan: ReadonlyMap<string, FabricBody>): number {
    return this.fabric.set(agentId, plan);
  }

  private stateOf(agentId: string): AgentSyncState {
    let st = this.states.get(agentId);
    if (!st) {
      st = new AgentSyncState(agentId);
      this.states.set(agentId, st);
    }
    return st;
  }

  private replumb(agentId: string): Promise<void> {
    return this.deps
      .replumb(agentId)
      .catch((err: unknown) =>
        this.deps.log.warn({ err: (err as Error).message }, 'could not check host endpoints after a resync'),
      );
  }

  /** A newer change of an object replaces its entry in its agent's snapshot. */
  private supersede(name: string, agentId: string, kind = ObjectKind.OBJECT_KIND_PORT): void {
    const st = this.states.get(agentId);
    const sync = st?.sync;
    if (st && sync?.supersede(name, kind)) this.snapshots.finished(st, sync);
  }
}
