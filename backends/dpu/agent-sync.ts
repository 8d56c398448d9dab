import { asWorkloadNetError, unavailable } from '../../core/errors';
import { LogRate } from '../../core/log-rate';
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
import { ackCodeName, nackError } from './ack-code';
import { AckEndpoints } from './ack-endpoint';
import type { AckWaiter } from './ack-waiter';
import type { AgentLink, LinkEvents, LostAgent } from './agent-link';
import type { AgentSession } from './agent-session';
import { AgentSyncState } from './agent-sync-state';
import type { DesiredState } from './desired-state';
import { fabricCarriage, type FabricCarriage } from './fabric-carriage';
import type { FabricBody } from './fabric-plan';
import type { PortFields } from './port-spec';
import { SnapshotSender } from './snapshot-sender';
import { UnexpectedAcks } from './unexpected-ack';

// Keeps each agent's ports in step with the desired state: a snapshot of its ports on every session it
// opens, single changes in between, Deletes until they are confirmed, and what its acks and port
// statuses say of each port. This is all that the backend hears from its agents (the link's events);
// the Backend verbs change the desired state and hand their changes here. From version 3 the same goes
// for each agent's fabric objects (setFabric): listed in every snapshot, sent singly in between, acked
// by (kind, name, generation).

export interface AgentSyncDeps {
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

  constructor(private readonly deps: AgentSyncDeps) {
    this.endpoints = new AckEndpoints(deps.log);
    this.unexpected = new UnexpectedAcks(deps.log);
    this.snapshots = new SnapshotSender({
      ...deps,
      sendDelete: (agentId, name, generation, reason) => this.sendDelete(agentId, name, generation, reason),
      replumb: (agentId) => this.replumb(agentId),
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
    const st = this.stateOf(agentId);
    const gen = this.deps.desired.delete(key) ?? this.deps.desired.tombstoneGeneration();
    this.supersede(key, agentId);
    if (this.deps.keepsUnlisted(agentId)) st.unconfirmedDeletes.set(key, gen);
    this.sendDelete(agentId, key, gen, reason);
  }

  /**
   * Drops a port from desired state (Detach, or an Attach failing after its agent programmed the port)
   * and has its agent delete it, waiting for the ack from a healthy agent only, so that the caller
   * returns once the port's netdevs are gone. Never fails.
   */
  async remove(key: string, agentId: string, reason = ''): Promise<void> {
    const { desired, link, acks, ackTimeoutMs, log } = this.deps;
    const gen = desired.delete(key);
    this.supersede(key, agentId);
    const st = this.stateOf(agentId);
    if (gen !== undefined && this.deps.keepsUnlisted(agentId)) st.unconfirmedDeletes.set(key, gen);
    const s = link.sessionOf(agentId);
    if (gen !== undefined && s && !s.healthy) {
      // A session gone quiet may still be alive, and may already hold its snapshot (with this port):
      // tell it now rather than leave the port there until the next snapshot. Waiting for its ack
      // would only hold Detach for the ack timeout.
      this.sendDelete(agentId, key, gen, reason || 'detached');
      log.info(
        { port: key, agentId },
        'port removed while its DPU agent is silent; told it without waiting for the ack',
      );
    } else if (gen !== undefined && s) {
      const who = `deletion of port ${key} (generation ${gen}) on DPU agent ${s.agentId}`;
      try {
        const acked = acks.wait(key, gen, s.id, ackTimeoutMs, who);
        this.sendDelete(agentId, key, gen, reason);
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
  private sendDelete(agentId: string, name: string, generation: number, reason: string): void {
    if (
      this.deps.link
        .sessionOf(agentId)
        ?.send({ delete: { name, generation, reason, kind: ObjectKind.OBJECT_KIND_PORT } })
    )
      this.stateOf(agentId).tombstones.set(name, generation);
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
      this.fabricAck(s, ack);
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
    const st = this.stateOf(s.agentId);
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

  // ---- the fabric ----------------------------------------------------------------------------

  /**
   * Whether the agent carries the fabric, as the fabric decided (a hello may state an endpoint another
   * holds): objects are sent, and acks taken, only while it does.
   */
  setCarriage(agentId: string, carriage: FabricCarriage): void {
    this.stateOf(agentId).carriage = carriage;
  }

  /**
   * Makes `plan` the fabric `agentId` should hold: changed objects get a new generation and go to its
   * session now, removed ones a Delete. An agent away (or whose snapshot is still to come) gets them in
   * its next snapshot. Returns how many objects changed.
   */
  setFabric(agentId: string, plan: ReadonlyMap<string, FabricBody>): number {
    const st = this.stateOf(agentId);
    const changes = st.fabric.set(plan, () => this.deps.desired.nextGeneration());
    // Only a session that already got its snapshot hears single changes: one still waiting for it (not
    // primed yet, or being established right now) gets them listed in the snapshot.
    const current = st.carriage.carries ? this.deps.link.sessionOf(agentId) : undefined;
    const s = current && st.sync?.sessionId === current.id ? current : undefined;
    for (const object of changes.upserts) {
      st.fabricTombstones.delete(object.name);
      this.supersede(object.name, agentId, ObjectKind.OBJECT_KIND_FABRIC);
      s?.send({ upsert: { fabric: object } });
    }
    for (const { name, generation } of changes.deletes) {
      this.supersede(name, agentId, ObjectKind.OBJECT_KIND_FABRIC);
      const reason = 'no longer in the peer table';
      if (s?.send({ delete: { name, generation, reason, kind: ObjectKind.OBJECT_KIND_FABRIC } }))
        st.fabricTombstones.set(name, generation);
    }
    // What the agent refused for another object's sake (an FDB entry it holds for another endpoint)
    // goes again right behind a change that may have freed it: the agent takes messages in order.
    if (s && changes.deletes.length + changes.replaced > 0) {
      const again = st.fabric.renewRefused(() => this.deps.desired.nextGeneration());
      for (const object of again) {
        this.supersede(object.name, agentId, ObjectKind.OBJECT_KIND_FABRIC);
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

  private fabricAck(s: AgentSession, ack: Ack): void {
    const st = this.stateOf(s.agentId);
    const ok = ack.code === AckCode.ACK_CODE_OK;
    // An agent that does not carry the fabric was sent none: whatever it acks is unknown to it.
    const current = st.carriage.carries ? st.fabric.get(ack.name) : undefined;
    if (current && current.generation === ack.generation) {
      st.fabric.recordAck(ack.name, { generation: ack.generation, ok, message: ack.message });
      const sync = st.sync;
      if (sync?.sessionId === s.id && sync.ack(ack.name, ack.generation, ok, ObjectKind.OBJECT_KIND_FABRIC))
        this.snapshots.finished(st, sync);
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
      this.unexpected.report(
        s,
        ack,
        current?.generation ?? st.fabricTombstones.get(ack.name),
        'fabric object',
      );
    }
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
