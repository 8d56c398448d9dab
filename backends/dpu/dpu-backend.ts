import type {
  AttachSpec,
  AttachmentView,
  Backend,
  DpuAgentStatus,
  DpuPortOptions,
  BackendHealth,
  DataplaneResult,
  Drift,
  ReconcileOptions,
  ReconcileOutcome,
} from '../../core/backend';
import {
  asWorkloadNetError,
  internal,
  invalidArgument,
  unavailable,
  type WorkloadNetError,
} from '../../core/errors';
import { KeyedMutex } from '../../core/attach/keyed-mutex';
import { LogRate } from '../../core/log-rate';
import { silentLogger, type Logger } from '../../core/logger';
import {
  AckCode,
  PortOperState,
  type Ack,
  type Endpoint,
  type PortStatus,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { ackCodeName, nackError } from './ack-code';
import { AckWaiter } from './ack-waiter';
import { AgentLink, type LostAgent } from './agent-link';
import type { AgentSession } from './agent-session';
import { AgentSyncState } from './agent-sync-state';
import { DesiredState, type DesiredPort } from './desired-state';
import { decodeDetails, encodeDetails } from './details';
import { EndpointRefused, createHostSide, type HostSide, type WorkloadPlacement } from './host-side';
import { monotonicMs } from '../../core/monotonic-clock';
import { ownString } from './own-string';
import { workloadInterface, workloadRoutes } from '../linux/workload-side';
import { place, type PlacementCandidate } from './placement';
import {
  featuresNeeded,
  macForKey,
  portFields,
  portFieldsFromView,
  portOptions,
  type PortFields,
} from './port-spec';
import { validateDpuPort } from '../../core/attach/validation';
import { SnapshotSync } from './snapshot-sync';

// The DPU backend: the core asks for a port, this backend places it on one of the connected agents
// (a node may carry several DPUs), turns it into desired state, hands it to that agent and waits for
// the agent to confirm it; then, if the agent exposes the port to the host as a netdev (a VF), it moves
// that netdev into the workload's namespace. It programs no packet path on the host itself: that is
// the DPU's job. A port stays on the agent it was placed on for its whole life.

export interface DpuBackendOptions {
  /** Unix socket on which agents connect. */
  agentSocket: string;
  /** Optional TCP listener "HOST:PORT" for agents; requires `tls`. */
  agentListen?: string;
  /** PEM file paths: the daemon's certificate and key, and the CA that signs agent certificates. */
  tls?: { cert: string; key: string; ca: string };
  /** How long Attach waits for the agent's ack. Default 5000. */
  ackTimeoutMs?: number;
  /** Heartbeat period in both directions. Default 500 (an agent silent for 1.5 s is lost). */
  heartbeatIntervalMs?: number;
  /** Silence after which an agent is considered gone. Default three heartbeat intervals. */
  heartbeatTimeoutMs?: number;
  /** Namespace in which agents' endpoint netdevs appear; default the daemon's own. */
  hostNetnsPath?: string;
  /** Link groups of the Linux backend's own links, which are never an agent's endpoint. */
  linuxLinkGroups?: number[];
  /**
   * After a restart (the store existed), how long from start-up an Attach waits for the agent to
   * reconnect before failing UNAVAILABLE, so that a daemon restart is invisible to runtimes. Default
   * 15000; 0 fails at once.
   */
  startupAgentWaitMs?: number;
  /** Agents that may hold a session at once. Default 16. */
  maxAgents?: number;
  logger?: Logger;
}

export { PROTOCOL_VERSION } from './hello-admission';
/** Agent feature: acks carry a host netdev that the daemon moves into the workload namespace. */
export const FEATURE_HOST_ENDPOINT = 'host-endpoint';
/**
 * Agent messages are small but for an inventory, which lists every VF (some 6,000 fit); anything
 * larger is a broken or hostile agent.
 */
export const MAX_AGENT_MESSAGE_BYTES = 256 * 1024;

/**
 * Heartbeats every 500 ms, so a stalled DPU is known lost 1.5 s into its silence and its new ports go
 * to another one: at 1 s the detection alone (3 s) exceeded the 2 s in which a node should have moved on.
 * A heartbeat is a few bytes; the test fixtures run at 200 ms under full load without false losses, and
 * a daemon whose own event loop stalled skips one liveness check instead of blaming the agent.
 */
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 500;

export class DpuBackend implements Backend {
  readonly name = 'dpu';
  private readonly log: Logger;
  private readonly ackTimeoutMs: number;
  private readonly heartbeatIntervalMs: number;
  private readonly heartbeatTimeoutMs: number;
  private readonly desired = new DesiredState();
  private readonly acks = new AckWaiter();
  /** Per agent id: its snapshot in flight and its outstanding Deletes. */
  private readonly agentStates = new Map<string, AgentSyncState>();
  private readonly logRate = new LogRate();
  private readonly hostSide: HostSide;
  /** Serialises attach, detach and re-plumbing of one port. */
  private readonly locks = new KeyedMutex();
  private readonly link: AgentLink;
  private epoch = 0;
  /** Set once reconcile has restored the stored ports: before that a snapshot would wipe the agent. */
  private primed = false;
  /**
   * The store was new at start-up, so it cannot vouch that an empty (or short) desired state is all
   * there is: snapshots then ask the agent to keep the ports they do not list.
   */
  private keepUnlisted = false;
  private startedAt = monotonicMs();
  private readonly startupAgentWaitMs: number;
  /** An agent has held the slot since this daemon started. */
  private agentSeen = false;
  /** A daemon ran here before this start (its store existed): its agent is expected to reconnect. */
  private agentExpected = false;
  private agentRemovedPorts = 0;
  /** Acks refused for naming another endpoint than the one plumbed (see onAck). */
  private refusedEndpointChanges = 0;

  constructor(private readonly opts: DpuBackendOptions) {
    this.log = opts.logger ?? silentLogger();
    this.ackTimeoutMs = positive('ackTimeoutMs', opts.ackTimeoutMs ?? 5000);
    this.heartbeatIntervalMs = positive(
      'heartbeatIntervalMs',
      opts.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS,
    );
    this.heartbeatTimeoutMs = positive(
      'heartbeatTimeoutMs',
      opts.heartbeatTimeoutMs ?? 3 * this.heartbeatIntervalMs,
    );
    if (this.heartbeatTimeoutMs <= this.heartbeatIntervalMs) {
      throw invalidArgument(
        `dpu heartbeatTimeoutMs (${this.heartbeatTimeoutMs}) must be longer than heartbeatIntervalMs (${this.heartbeatIntervalMs})`,
      );
    }
    this.startupAgentWaitMs = opts.startupAgentWaitMs ?? 15_000;
    this.hostSide = createHostSide(opts.hostNetnsPath, opts.linuxLinkGroups ?? [], this.log);
    this.link = new AgentLink(
      {
        agentSocket: opts.agentSocket,
        agentListen: opts.agentListen,
        tls: opts.tls,
        maxMessageBytes: MAX_AGENT_MESSAGE_BYTES,
        maxAgents: opts.maxAgents ?? 16,
        timing: {
          heartbeatIntervalMs: this.heartbeatIntervalMs,
          heartbeatTimeoutMs: this.heartbeatTimeoutMs,
        },
        logger: this.log,
      },
      {
        established: (sess, previous) => this.established(sess, previous),
        ack: (sess, ack) => this.onAck(sess, ack),
        portStatus: (sess, ps) => this.onPortStatus(sess, ps),
        inventory: (sess) => this.onInventory(sess),
        lost: (sess, reason) => this.onLost(sess, reason),
      },
    );
  }

  /** The TCP port agents can reach (when agentListen is set), e.g. after asking for port 0. */
  get agentTcpPort(): number | undefined {
    return this.link.tcpPort;
  }

  start(): Promise<void> {
    this.startedAt = monotonicMs();
    return this.link.start();
  }

  async stop(): Promise<void> {
    await this.link.stop();
    await this.hostSide.close();
  }

  // ---- what the agent link reports -----------------------------------------------------------

  private established(s: AgentSession, prev: LostAgent | undefined): void {
    this.agentSeen = true;
    const st = this.stateOf(s.agentId);
    st.version = s.version;
    // A new session reports its inventory afresh; a version 1 agent has none.
    st.inventory = undefined;
    if (prev && prev.agentId === s.agentId && prev.bootId !== s.bootId) {
      this.log.info(
        { agentId: s.agentId, oldBootId: prev.bootId, bootId: s.bootId, ports: this.desired.size },
        'agent restarted with a new boot id (its state is gone); the snapshot re-programs every port',
      );
    }
    if (this.primed) {
      this.sendSnapshot(s);
    } else {
      this.log.info(
        { agentId: s.agentId },
        'agent connected before the start-up reconcile; its snapshot waits for it',
      );
    }
  }

  private stateOf(agentId: string): AgentSyncState {
    let st = this.agentStates.get(agentId);
    if (!st) {
      st = new AgentSyncState(agentId);
      this.agentStates.set(agentId, st);
    }
    return st;
  }

  private onLost(s: AgentSession, reason: string): void {
    // Acks can only arrive on the session that got the change; the next snapshot settles the rest.
    const st = this.stateOf(s.agentId);
    st.tombstones.clear();
    this.desired.clearOperStates(s.agentId);
    st.sync?.abandon();
    st.sync = undefined;
    const failed = this.acks.failSession(s.id, (name) =>
      unavailable(
        `the stream to DPU agent ${s.agentId} ended while waiting for port ${name} (${reason}); retry once the agent is back`,
      ),
    );
    if (failed > 0) {
      this.log.warn({ agentId: s.agentId, failed }, 'in-flight port changes failed: agent stream ended');
    }
  }

  /** The agent's ports only: each agent holds what was placed on it. */
  private onInventory(s: AgentSession): void {
    const inv = s.inventory;
    if (!inv) return;
    this.stateOf(s.agentId).inventory = inv;
    this.log.info(
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

  private sendSnapshot(s: AgentSession): void {
    const st = this.stateOf(s.agentId);
    const ports = this.desired.snapshot(s.agentId);
    this.epoch += 1;
    const sync = new SnapshotSync(s.id, this.epoch, ports);
    st.sync?.abandon();
    st.sync = sync;
    s.send({ snapshotBegin: { epoch: sync.epoch, keepUnlisted: this.keepUnlisted } });
    for (const port of ports) s.send({ upsert: { port } });
    s.send({ syncComplete: { epoch: sync.epoch, portCount: ports.length } });
    // The snapshot keeps what it does not list; what this daemon removed must still go.
    for (const [name, generation] of st.unconfirmedDeletes) {
      if (this.desired.get(name)?.agentId === s.agentId) continue;
      if (s.send({ delete: { name, generation, reason: 'removed while the agent was away' } }))
        st.tombstones.set(name, generation);
    }
    this.log.info({ agentId: s.agentId, epoch: sync.epoch, ports: ports.length }, 'snapshot sent');
    if (sync.complete) this.syncFinished(st, sync);
  }

  private syncFinished(st: AgentSyncState, sync: SnapshotSync): void {
    st.lastSyncMs = sync.durationMs;
    this.log.info(
      { agentId: st.agentId, epoch: sync.epoch, ms: st.lastSyncMs, failed: sync.failed.length },
      sync.failed.length ? 'snapshot applied with failures' : 'snapshot applied',
    );
    void this.replumbAfterSync(st.agentId).catch((err: unknown) =>
      this.log.warn({ err: (err as Error).message }, 'could not check host endpoints after a resync'),
    );
  }

  /**
   * After a resync, an endpoint that sits in the host namespace instead of its workload is a VF the
   * agent re-created (a DPU reboot takes its VFs with it): move it back where the port was plumbed.
   */
  private async replumbAfterSync(agentId: string): Promise<void> {
    const candidates = [...this.desired.entries()].filter(
      (e) =>
        e.agentId === agentId &&
        e.placement &&
        e.ack?.ok &&
        e.ack.endpoint?.netdev &&
        e.ack.generation === e.port.generation,
    );
    if (candidates.length === 0) return;
    const inHost = await this.hostSide.hostLinkNames();
    for (const e of candidates) {
      const endpoint = e.ack?.endpoint?.netdev;
      if (!endpoint || !inHost.has(endpoint)) continue;
      const sess = this.link.sessionOf(agentId);
      const refusal = sess && e.ack?.endpoint ? inventoryRefusal(sess, e.ack.endpoint) : undefined;
      if (refusal) {
        this.log.error(
          { port: e.port.name, endpoint, reason: refusal },
          'refused to re-plumb the endpoint the agent reported',
        );
        continue;
      }
      const { name, generation } = e.port;
      await this.locks.run(name, async () => {
        const cur = this.desired.get(name);
        // Changed or gone meanwhile: whoever changed it plumbed it.
        if (!cur?.placement || cur.port.generation !== generation) return;
        try {
          const { ifIndex } = await this.hostSide.plumb({ ...cur.placement, endpoint, mac: cur.port.mac });
          this.desired.setPlacement(name, cur.placement, { netdev: endpoint, linkIndex: ifIndex });
          this.log.info({ port: name, endpoint }, 're-plumbed a re-created endpoint into its workload');
        } catch (err) {
          // A refused endpoint (the agent named a host netdev that is no VF of its) is an error worth
          // an operator's eye; the port stays desired, and nothing on the host was touched.
          const refused = err instanceof EndpointRefused;
          this.log[refused ? 'error' : 'warn'](
            { port: name, endpoint, err: (err as Error).message },
            refused
              ? 'refused to re-plumb the endpoint the agent reported'
              : 'could not re-plumb a re-created endpoint',
          );
        }
      });
    }
  }

  /** A newer change of a port replaces its entry in its agent's snapshot. */
  private supersede(name: string, agentId: string): void {
    const st = this.agentStates.get(agentId);
    const sync = st?.sync;
    if (st && sync?.supersede(name)) this.syncFinished(st, sync);
  }

  private onAck(s: AgentSession, ack: Ack): void {
    const st = this.stateOf(s.agentId);
    // A port placed on another agent is none of this agent's business.
    const placed = this.desired.get(ack.name);
    const entry = placed?.agentId === s.agentId ? placed : undefined;
    const tomb = st.tombstones.get(ack.name);
    const ok = ack.code === AckCode.ACK_CODE_OK;
    if (entry && entry.port.generation === ack.generation) {
      const endpoint = this.endpointOf(s, entry, ack);
      if (endpoint === 'refused') {
        const sync = st.sync;
        if (sync?.sessionId === s.id && sync.ack(ack.name, ack.generation, false))
          this.syncFinished(st, sync);
        return;
      }
      this.desired.recordAck(ack.name, {
        generation: ack.generation,
        ok,
        message: ack.message,
        endpoint: endpoint.endpoint,
        bootId: endpoint.bootId,
      });
      const sync = st.sync;
      if (sync?.sessionId === s.id && sync.ack(ack.name, ack.generation, ok)) this.syncFinished(st, sync);
      if (!ok && !this.acks.isWaiting(ack.name)) {
        this.log.warn(
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
      this.unexpectedAck(s, ack, entry?.port.generation ?? tomb);
    }
    // A waiter only ever takes its exact generation (matched above as current or tombstone).
    this.acks.deliver(ack, s.id);
  }

  /**
   * The endpoint an ack at a port's current generation leaves recorded, or 'refused' (reported) when it
   * names another one than the port already has. Detach and re-plumbing act on the recorded endpoint, so
   * an agent re-acking a plumbed port as, say, `eth0` must not become the daemon's word for it: the
   * endpoint stays what the daemon plumbed for as long as the DPU keeps the boot that created it. A DPU
   * that rebooted (a new boot id) re-created its VFs and may name them anew; that endpoint is moved in
   * only through the same guards as at Attach (replumbAfterSync). Within one boot, an ack that names no
   * endpoint, or a negative one, keeps the one recorded.
   */
  private endpointOf(
    s: AgentSession,
    entry: DesiredPort,
    ack: Ack,
  ): { endpoint?: Endpoint; bootId: string } | 'refused' {
    const recorded = entry.ack?.endpoint?.netdev ? entry.ack : undefined;
    const offered = ack.endpoint?.netdev ? ack.endpoint : undefined;
    if (!recorded?.endpoint) return { endpoint: offered, bootId: s.bootId };
    // Another boot's endpoint went with that boot: what this boot acks OK (a netdev, or none for an
    // agent without host endpoints) is the port's endpoint now.
    if (ack.code === AckCode.ACK_CODE_OK && recorded.bootId !== undefined && recorded.bootId !== s.bootId)
      return { endpoint: offered, bootId: s.bootId };
    if (!offered || ack.code !== AckCode.ACK_CODE_OK || sameEndpoint(recorded.endpoint, offered))
      return { endpoint: recorded.endpoint, bootId: recorded.bootId ?? s.bootId };
    this.refusedEndpointChanges += 1;
    const n = this.logRate.occurrence('endpoint-change');
    if (n !== undefined) {
      this.log.error(
        {
          agentId: s.agentId,
          port: ack.name,
          generation: ack.generation,
          endpoint: recorded.endpoint.netdev,
          offered: offered.netdev.slice(0, 64),
          occurrences: n,
        },
        'refused an ack naming another endpoint for a port already plumbed; the port keeps its endpoint',
      );
    }
    return 'refused';
  }

  /** Acks for replaced generations are normal (logged quietly); for unknown ports, not (logged, throttled). */
  private unexpectedAck(s: AgentSession, ack: Ack, newest: number | undefined): void {
    if (newest !== undefined && ack.generation < newest) {
      this.log.debug({ port: ack.name, generation: ack.generation, current: newest }, 'stale ack ignored');
      return;
    }
    const n = this.logRate.occurrence('unexpected-ack');
    if (n === undefined) return;
    this.log.warn(
      { agentId: s.agentId, port: ack.name.slice(0, 256), generation: ack.generation, occurrences: n },
      newest === undefined
        ? 'ack for a port this daemon does not know; ignored'
        : 'ack for a generation never sent; ignored',
    );
  }

  private onPortStatus(s: AgentSession, ps: PortStatus): void {
    switch (ps.operState) {
      case PortOperState.PORT_OPER_STATE_REMOVED:
        this.agentRemovedPorts += 1;
        this.log.info(
          { agentId: s.agentId, port: ps.name.slice(0, 256), message: ps.message },
          'agent removed a port that is not desired',
        );
        return;
      case PortOperState.PORT_OPER_STATE_UP:
      case PortOperState.PORT_OPER_STATE_DOWN: {
        const state = ps.operState === PortOperState.PORT_OPER_STATE_UP ? 'up' : 'down';
        if (this.desired.setOperState(ps.name, state, s.agentId)) {
          this.log.info({ port: ps.name, state, message: ps.message }, 'port state changed');
          return;
        }
        const n = this.logRate.occurrence('unknown-status');
        if (n !== undefined) {
          this.log.warn(
            { port: ps.name.slice(0, 256), occurrences: n },
            'status for a port this daemon does not know; ignored',
          );
        }
        return;
      }
      default:
        this.log.debug({ port: ps.name.slice(0, 256) }, 'port status without a known state ignored');
    }
  }

  // ---- the Backend interface -----------------------------------------------------------------

  /**
   * The session a port's changes go to. A port already placed stays on its agent; a new one goes to
   * the agent the caller named, else to the healthy agent with the most room (placement.ts). Once an
   * agent has been seen, a missing one is UNAVAILABLE at once: callers must not wait for an agent
   * that went away. Right after the daemon restarted, though, its agents are still reconnecting (their
   * backoff), and a runtime's call that arrives then waits for its agent a little
   * (startupAgentWaitMs), so that a daemon restart is invisible to runtimes. A first start (new store)
   * fails at once.
   */
  private async chooseAgent(spec: AttachSpec, port: PortFields): Promise<AgentSession> {
    if (!this.primed) {
      throw unavailable(
        'the DPU backend has not restored its ports yet (start-up reconcile not done); retry shortly',
      );
    }
    const placedOn = this.desired.get(spec.key)?.agentId;
    const target = placedOn ?? (spec.dpu || undefined);
    const waitLeft = this.startupAgentWaitMs - (monotonicMs() - this.startedAt);
    if (this.agentExpected && waitLeft > 0) {
      const missing = target ? !this.link.sessionOf(target) : this.link.sessions().length === 0;
      if (missing) await this.link.waitForAgent(Math.min(waitLeft, this.ackTimeoutMs), target);
    }
    if (placedOn) return this.link.requireHealthy(placedOn);
    let candidates = this.candidates();
    // Unasked, a port that needs VF settings goes only to an agent that can apply them.
    const needed = featuresNeeded(port);
    if (!spec.dpu && needed.length > 0) {
      const healthy = candidates.filter((c) => c.healthy);
      const able = new Set(
        this.link
          .sessions()
          .filter((x) => vfSettingsRefusal(x, spec.key, port) === undefined)
          .map((x) => x.agentId),
      );
      candidates = candidates.filter((c) => able.has(c.agentId));
      if (healthy.length > 0 && !candidates.some((c) => c.healthy)) {
        throw invalidArgument(
          `no healthy DPU agent supports what ${spec.key} asks for (${needed.map(([, what]) => what).join(', ')}${port.pf !== undefined ? ` on PF ${port.pf}` : ''}); agents: ${healthy.map((c) => c.agentId).join(', ')}`,
        );
      }
    }
    const chosen = place(spec.dpu || undefined, candidates, this.link);
    if (!chosen.ok) throw chosen.error;
    return this.link.requireHealthy(chosen.agentId);
  }

  /** Every agent holding a session, with its room for ports. */
  private candidates(): PlacementCandidate[] {
    return this.link.sessions().map((s) => ({
      agentId: s.agentId,
      healthy: s.healthy,
      capacity: capacityOf(s),
      used: this.desired.countOn(s.agentId),
    }));
  }

  /** Refuses, before anything is sent, what the agent said in its hello that it cannot do. */
  private checkCapabilities(s: AgentSession, spec: AttachSpec, port: PortFields): void {
    const refusal = vfSettingsRefusal(s, spec.key, port);
    if (refusal) throw invalidArgument(refusal);
    const caps = s.hello?.capabilities;
    if (!caps) return;
    const v6 = spec.ips.find((i) => i.family === 6);
    if (v6 && !caps.ipv6) {
      throw invalidArgument(
        `DPU agent ${s.agentId} does not support IPv6, but ${spec.key} was given ${v6.address}; use an IPv4-only pool`,
      );
    }
    if ((caps.minMtu && spec.mtu < caps.minMtu) || (caps.maxMtu && spec.mtu > caps.maxMtu)) {
      throw invalidArgument(
        `MTU ${spec.mtu} is outside what DPU agent ${s.agentId} supports (${caps.minMtu || 'any'}-${caps.maxMtu || 'any'})`,
      );
    }
  }

  /** Drops a port from desired state and tells the agent without waiting (the failure paths' rollback). */
  private forget(key: string, s: AgentSession, reason: string): void {
    const st = this.stateOf(s.agentId);
    const gen = this.desired.delete(key) ?? this.desired.tombstoneGeneration();
    this.supersede(key, s.agentId);
    if (this.keepUnlisted) st.unconfirmedDeletes.set(key, gen);
    // The agent's current session, which need not be `s`: a session that took over from `s` in the
    // same turn of the event loop (a hello replacing a silent one) was sent its snapshot while this
    // port was still desired, before this failure reached here.
    const current = this.link.sessionOf(s.agentId);
    if (current?.send({ delete: { name: key, generation: gen, reason } })) st.tombstones.set(key, gen);
  }

  /**
   * The workload's interface as it will be, except for what only the agent can say (its endpoint,
   * the generation it confirms): attach() reports those, and the core records them.
   */
  plan(spec: AttachSpec): DataplaneResult {
    const iface = workloadInterface(spec);
    return {
      ifName: spec.ifName,
      mac: this.desired.get(spec.key)?.port.mac ?? macForKey(spec.key),
      mtu: spec.mtu,
      routes: workloadRoutes(iface),
    };
  }

  attach(spec: AttachSpec, planned: DataplaneResult): Promise<DataplaneResult> {
    return this.locks.run(spec.key, () => this.attachLocked(spec, planned));
  }

  private async attachLocked(spec: AttachSpec, planned: DataplaneResult): Promise<DataplaneResult> {
    const previous = this.desired.get(spec.key);
    // A repair carries no options of its own: the port keeps those it was given.
    const options = spec.dpuPort ?? (previous ? portOptions(previous.port) : undefined);
    const fields = portFields(spec, previous?.port.mac ?? macForKey(spec.key), options);
    const s = await this.chooseAgent(spec, fields);
    this.checkCapabilities(s, spec, fields);
    const st = this.stateOf(s.agentId);
    const port = this.desired.upsert(fields, s.agentId);
    st.tombstones.delete(spec.key);
    st.unconfirmedDeletes.delete(spec.key);
    this.supersede(spec.key, s.agentId);
    const who = `port ${spec.key} (generation ${port.generation}) on DPU agent ${s.agentId}`;

    let ack: Ack;
    try {
      const acked = this.acks.wait(spec.key, port.generation, s.id, this.ackTimeoutMs, who);
      if (!s.send({ upsert: { port } })) {
        this.acks.cancel(spec.key, unavailable(`${who}: the agent stream closed before the port was sent`));
      }
      ack = await acked;
    } catch (err) {
      this.forget(spec.key, s, `attach failed: ${asWorkloadNetError(err).message}`);
      throw err;
    }
    if (ack.code !== AckCode.ACK_CODE_OK) {
      this.forget(spec.key, s, 'attach failed: the agent could not program the port');
      throw nackError(ack, who);
    }

    const endpoint = ack.endpoint?.netdev ?? '';
    if (!endpoint && s.hello?.capabilities?.features.includes(FEATURE_HOST_ENDPOINT)) {
      this.forget(spec.key, s, 'attach failed: the ack named no host endpoint');
      throw internal(
        `${who} was acknowledged without a host endpoint although the agent advertises "${FEATURE_HOST_ENDPOINT}"`,
      );
    }
    let mac = ack.endpoint?.mac || port.mac;
    let ifIndex = 0;
    if (endpoint && ack.endpoint) {
      const refusal = inventoryRefusal(s, ack.endpoint);
      if (refusal) {
        const failure = new EndpointRefused(
          `the DPU agent reported ${endpoint} as the host end of its port, but ${refusal}; refusing to move it into ${spec.netnsPath}`,
        );
        this.log.error({ port: spec.key, endpoint }, failure.message);
        this.forget(spec.key, s, `attach failed: ${failure.message}`);
        throw failure;
      }
      const placement = placementOf(spec);
      try {
        ({ mac, ifIndex } = await this.hostSide.plumb({
          ...placement,
          endpoint,
          mac: port.mac,
          netns: spec.netns,
        }));
      } catch (err) {
        const failure = asWorkloadNetError(err);
        if (failure instanceof EndpointRefused) this.log.error({ port: spec.key, endpoint }, failure.message);
        this.forget(spec.key, s, `attach failed: ${failure.message}`);
        throw failure;
      }
      this.desired.setPlacement(spec.key, placement, { netdev: endpoint, linkIndex: ifIndex });
    }
    return {
      ...planned,
      mac,
      hostIfName: endpoint || undefined,
      details: encodeDetails({
        port: port.name,
        generation: port.generation,
        mac: port.mac,
        endpoint,
        agentId: s.agentId,
        bootId: s.bootId,
        pf: ack.endpoint?.pfIndex,
        vf: ack.endpoint?.vfIndex,
        pciAddress: ack.endpoint?.pciAddress ?? '',
        representor: ack.endpoint?.representor ?? '',
        ifIndex,
        portOptions: options ? JSON.stringify(options) : '',
      }),
    };
  }

  detach(att: AttachmentView): Promise<void> {
    return this.locks.run(att.key, () => this.detachLocked(att));
  }

  private async detachLocked(att: AttachmentView): Promise<void> {
    const entry = this.desired.get(att.key);
    const stored = decodeDetails(att.dataplane);
    // The link moved in goes back under the name it came with; which link that is, is told by its index
    // and the port's MAC alone (host-side.ts), whatever an agent has said since.
    const plumbed = entry?.plumbed;
    const endpoint = plumbed?.netdev || stored?.endpoint || '';
    const agentId = entry?.agentId ?? stored?.agentId ?? '';
    // Hand the netdev back first, so that the agent finds its VF where it left it when it reclaims it.
    let hostError: WorkloadNetError | undefined;
    if (endpoint) {
      try {
        await this.hostSide.unplumb({
          endpoint,
          mac: entry?.port.mac ?? stored?.mac ?? '',
          ifIndex: plumbed?.linkIndex ?? stored?.ifIndex ?? 0,
          netnsPath: att.netnsPath,
          netnsInode: att.netnsInode,
          ifName: att.ifName,
        });
      } catch (err) {
        hostError = asWorkloadNetError(err);
        this.log.warn(
          { port: att.key, endpoint, err: hostError.message },
          'could not return the endpoint netdev to the host',
        );
      }
    }
    const gen = this.desired.delete(att.key);
    this.supersede(att.key, agentId);
    const st = this.stateOf(agentId);
    if (gen !== undefined && this.keepUnlisted) st.unconfirmedDeletes.set(att.key, gen);
    const s = this.link.sessionOf(agentId);
    if (gen !== undefined && s && !s.healthy) {
      // A session gone quiet may still be alive, and may already hold its snapshot (with this port):
      // tell it now rather than leave the port there until the next snapshot. Waiting for its ack
      // would only hold Detach for the ack timeout.
      if (s.send({ delete: { name: att.key, generation: gen, reason: 'detached' } }))
        st.tombstones.set(att.key, gen);
      this.log.info(
        { port: att.key, agentId },
        'port removed while its DPU agent is silent; told it without waiting for the ack',
      );
    } else if (gen !== undefined && s) {
      st.tombstones.set(att.key, gen);
      const who = `deletion of port ${att.key} (generation ${gen}) on DPU agent ${s.agentId}`;
      try {
        const acked = this.acks.wait(att.key, gen, s.id, this.ackTimeoutMs, who);
        s.send({ delete: { name: att.key, generation: gen, reason: '' } });
        const ack = await acked;
        if (ack.code !== AckCode.ACK_CODE_OK) throw nackError(ack, who);
      } catch (err) {
        // The port is no longer desired, so the next snapshot removes it whatever happened here:
        // failing Detach would only keep the workload's addresses from being released.
        this.log.warn(
          { port: att.key, err: asWorkloadNetError(err).message },
          'agent did not confirm a deletion; the next snapshot removes it',
        );
      }
    } else if (gen !== undefined) {
      this.log.info(
        { port: att.key, agentId },
        'port removed while its DPU agent is away; its next snapshot removes it',
      );
    }
    if (hostError) throw hostError;
  }

  async check(att: AttachmentView): Promise<Drift[]> {
    const entry = this.desired.get(att.key);
    if (!entry) return [{ kind: 'port-missing', message: `port ${att.key} is not in the DPU desired state` }];
    const drift: Drift[] = [];
    if (entry.ack && !entry.ack.ok && entry.ack.generation === entry.port.generation) {
      drift.push({
        kind: 'port-failed',
        message: `the agent could not program port ${att.key}: ${entry.ack.message}`,
      });
    }
    if (entry.operState === 'down')
      drift.push({ kind: 'port-down', message: `the agent reports port ${att.key} down` });
    if (!this.link.sessionOf(entry.agentId)?.healthy)
      drift.push({
        kind: 'dpu-down',
        message: `port ${att.key} is on DPU agent ${entry.agentId}, which is away: ${this.link.whyUnavailable(entry.agentId)}`,
      });
    const endpoint = decodeDetails(att.dataplane)?.endpoint || entry.ack?.endpoint?.netdev;
    if (endpoint) drift.push(...(await this.hostSide.inspect(att)));
    return drift;
  }

  async reconcile(
    atts: AttachmentView[],
    opts: ReconcileOptions = { storeIsNew: false },
  ): Promise<ReconcileOutcome> {
    const outcome: ReconcileOutcome = { orphansRemoved: [], missing: [], healthy: [], warnings: [] };
    this.keepUnlisted = opts.storeIsNew;
    // A store that existed before this start means a daemon ran here before, with its agent.
    this.agentExpected = !opts.storeIsNew;
    if (opts.storeIsNew) {
      outcome.warnings.push(
        'the store is new: DPU agents are asked to keep ports this daemon does not list (they may belong ' +
          'to running workloads whose state was lost); see "A lost state store" in docs/troubleshooting.md',
      );
    }
    const withEndpoint: AttachmentView[] = [];
    for (const att of atts) {
      const d = decodeDetails(att.dataplane);
      if (!att.dataplane || !d || !d.agentId) {
        outcome.missing.push(att.key);
        if (att.dataplane) {
          outcome.warnings.push(
            `${att.key}: no port confirmed by a DPU agent is recorded (an attach cut short, or one made by another backend); re-programming it`,
          );
        }
        continue;
      }
      const endpoint = d.endpoint
        ? {
            netdev: ownString(d.endpoint),
            mac: ownString(att.dataplane.mac),
            pfIndex: d.pf,
            vfIndex: d.vf,
            pciAddress: ownString(d.pciAddress ?? ''),
            representor: ownString(d.representor ?? ''),
          }
        : undefined;
      this.desired.restore(
        portFieldsFromView(att, d.mac || undefined, storedOptions(d.portOptions)),
        d.generation,
        ownString(d.agentId),
        endpoint,
        endpoint ? placementOf(att) : undefined,
        ownString(d.bootId),
        d.ifIndex,
      );
      if (d.endpoint) withEndpoint.push(att);
      else outcome.healthy.push(att.key);
    }
    // The agent's side is repaired by the snapshot; only the host side can be checked here. A port whose
    // workload interface is gone is reported missing so the core repairs it (or releases it when the
    // namespace went away with its workload).
    for (const att of withEndpoint) {
      const drift = await this.hostSide.inspect(att);
      if (drift.some((d) => d.kind === 'interface-missing' || d.kind === 'netns-missing'))
        outcome.missing.push(att.key);
      else outcome.healthy.push(att.key);
    }
    // Only now may a snapshot go out: before this point it would have told the agent to drop ports.
    this.primed = true;
    let sessions = this.link.sessions();
    for (const s of sessions) this.sendSnapshot(s);
    if (sessions.length === 0 && outcome.missing.length > 0) {
      // The core repairs missing ports right after this returns, which needs an agent; one that is
      // reconnecting after our restart usually gets here within its backoff.
      const s = await this.link.waitForAgent(this.ackTimeoutMs);
      sessions = s ? [s] : [];
    }
    await Promise.all(
      sessions.map(async (s) => {
        const sync = this.agentStates.get(s.agentId)?.sync;
        if (sync?.sessionId !== s.id) return;
        const timedOut = await Promise.race([
          sync.done.then(() => false),
          new Promise<boolean>((r) => setTimeout(() => r(true), this.ackTimeoutMs).unref()),
        ]);
        if (timedOut)
          outcome.warnings.push(
            `DPU agent ${s.agentId} did not confirm the snapshot within ${this.ackTimeoutMs} ms`,
          );
        for (const name of sync.failed)
          outcome.warnings.push(`${name}: DPU agent ${s.agentId} could not re-program the port`);
      }),
    );
    if (sessions.length === 0) {
      outcome.warnings.push(
        'no DPU agent connected yet; ports are restored and will be sent when their agents connect',
      );
    }
    const away = this.desired.agents().filter((id) => !this.link.sessionOf(id));
    if (sessions.length > 0 && away.length > 0) {
      outcome.warnings.push(
        `DPU agents not connected yet, their ports are sent when they are: ${away.sort().join(', ')}`,
      );
    }
    this.log.info(
      { ports: this.desired.size, healthy: outcome.healthy.length, missing: outcome.missing.length },
      'desired state restored',
    );
    return outcome;
  }

  /** Degraded while the agent its port is placed on is away: the DPU keeps its last dataplane. */
  attachmentState(att: AttachmentView): 'ready' | 'degraded' {
    const agentId = this.desired.get(att.key)?.agentId ?? decodeDetails(att.dataplane)?.agentId;
    if (agentId === undefined) return 'ready';
    return this.link.sessionOf(agentId)?.healthy ? 'ready' : 'degraded';
  }

  async health(): Promise<BackendHealth> {
    const reasons: string[] = [];
    const notes: string[] = [];
    const details: Record<string, string | number | boolean> = {
      agentSocket: this.opts.agentSocket,
      ports: this.desired.size,
      pendingAcks: this.acks.pending,
      agentRemovedPorts: this.agentRemovedPorts,
      refusedEndpointChanges: this.refusedEndpointChanges,
    };
    if (this.opts.agentListen) details.agentListen = this.opts.agentListen;
    if (this.keepUnlisted) details.agentsKeepUnlistedPorts = true;
    if (!this.primed) reasons.push('the start-up reconcile has not run yet');
    const sessions = this.link.sessions();
    const lost = this.link.lost();
    const healthy = sessions.filter((s) => s.healthy);
    // An agent that has ports but never connected to this daemon (after a restart) is away as well.
    const neverSeen = this.desired
      .agents()
      .filter((id) => !this.link.sessionOf(id) && !this.link.lostOf(id))
      .sort();
    const away = [
      ...sessions.filter((s) => !s.healthy).map((s) => s.agentId),
      ...lost.map((l) => l.agentId),
      ...neverSeen,
    ].sort();
    details.agents = sessions.length + lost.length + neverSeen.length;
    details.agentsHealthy = healthy.length;
    if (away.length > 0) details.agentsAway = away.join(',');
    const only = sessions.length + lost.length === 1;
    for (const s of sessions) {
      if (only) {
        details.agentId = s.agentId;
        details.bootId = s.bootId;
        details.sessionId = s.id;
        details.agentPeer = s.peer.address;
        details.lastHeartbeatAgeMs = s.heartbeatAgeMs;
        const sync = this.agentStates.get(s.agentId)?.sync;
        details.synced = sync?.sessionId === s.id && sync.complete;
      }
      if (!s.healthy) notes.push(`DPU agent ${s.agentId} has been silent for ${s.silenceMs} ms`);
    }
    for (const l of lost) {
      if (only) {
        details.agentId = l.agentId;
        details.bootId = l.bootId;
        details.disconnectedAgoMs = monotonicMs() - l.at;
        details.synced = false;
      }
      notes.push(`DPU agent ${l.agentId} disconnected: ${l.reason}`);
    }
    for (const id of neverSeen) notes.push(`DPU agent ${id} holds ports but has not connected yet`);
    if (sessions.length + lost.length === 0) {
      notes.push(`no DPU agent connected on ${this.opts.agentSocket}`);
      details.synced = false;
    }
    if (healthy.length > 0 && only) {
      const st = this.agentStates.get(healthy[0]?.agentId ?? '');
      if (st?.lastSyncMs !== undefined) details.lastSyncMs = st.lastSyncMs;
    } else {
      const syncs = [...this.agentStates.values()]
        .map((st) => st.lastSyncMs)
        .filter((ms): ms is number => ms !== undefined);
      if (syncs.length > 0) details.lastSyncMs = Math.max(...syncs);
    }
    // The node serves new ports while one agent is healthy; the rest are worth an operator's note.
    if (healthy.length === 0) reasons.push(...notes);
    const ready = reasons.length === 0;
    return { ready, reasons: ready ? notes : reasons, details, dpus: this.dpuStatuses(neverSeen) };
  }

  /** Every agent known: connected, gone, or holding ports without having connected since start-up. */
  private dpuStatuses(neverSeen: string[]): DpuAgentStatus[] {
    const out: DpuAgentStatus[] = [];
    const base = (id: string): DpuAgentStatus => {
      const st = this.agentStates.get(id);
      const inv = st?.inventory;
      return {
        id,
        connected: false,
        healthy: false,
        bootId: '',
        protocolVersion: st?.version ?? 0,
        firmwareVersion: inv?.firmwareVersion ?? '',
        agentVersion: inv?.agentVersion ?? '',
        pfs: (inv?.pfs ?? []).map((pf) => ({
          index: pf.index,
          name: pf.name,
          pciAddress: pf.pciAddress,
          linkState: pf.linkState,
          speedMbps: pf.speedMbps,
          mtu: pf.mtu,
          vfsTotal: pf.vfTotal,
          vfsFree: pf.vfFree,
        })),
        vfsTotal: inv?.vfTotal ?? 0,
        vfsFree: inv?.vfFree ?? 0,
        ports: this.desired.countOn(id),
        synced: false,
      };
    };
    for (const s of this.link.sessions()) {
      const sync = this.agentStates.get(s.agentId)?.sync;
      out.push({
        ...base(s.agentId),
        connected: true,
        healthy: s.healthy,
        bootId: s.bootId,
        lastHeartbeatAgeMs: s.heartbeatAgeMs,
        sessionId: s.id,
        peer: s.peer.address,
        synced: sync?.sessionId === s.id && sync.complete,
        reason: s.healthy ? undefined : `silent for ${s.silenceMs} ms`,
      });
    }
    for (const l of this.link.lost())
      out.push({ ...base(l.agentId), bootId: l.bootId, reason: `disconnected: ${l.reason}` });
    for (const id of neverSeen) out.push({ ...base(id), reason: 'holds ports but has not connected yet' });
    return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }
}

/** The options stored with an attachment, or none when absent or not readable. */
function storedOptions(json: string | undefined): DpuPortOptions | undefined {
  if (!json) return undefined;
  try {
    return validateDpuPort(JSON.parse(json) as DpuPortOptions);
  } catch {
    return undefined;
  }
}

/**
 * Ports an agent can hold: its VFs when it reported an inventory, bounded by the max_ports of its
 * hello; no stated limit is unlimited.
 */
function capacityOf(s: AgentSession): number {
  const maxPorts = s.hello?.capabilities?.maxPorts || Number.POSITIVE_INFINITY;
  const inv = s.inventory;
  return inv ? Math.min(inv.vfTotal, maxPorts) : maxPorts;
}

/**
 * Why the endpoint an agent named is not one of its VFs, or undefined when it is. Version 1 agents
 * send no inventory, and only the host guard applies to them; a version 2 agent's endpoint must be a
 * VF its inventory lists (which also keeps it from naming another agent's VF), with the PF and VF
 * index the inventory gives it.
 */
export function inventoryRefusal(s: AgentSession, endpoint: Endpoint): string | undefined {
  if (s.version < 2) return undefined;
  const inv = s.inventory;
  if (!inv) return `DPU agent ${s.agentId} has sent no inventory, so no VF of it can be vouched for`;
  const vf = inv.vf(endpoint.netdev);
  if (!vf) return `it is not a VF in DPU agent ${s.agentId}'s inventory`;
  if (
    (endpoint.pfIndex !== undefined && endpoint.pfIndex !== vf.pf) ||
    (endpoint.vfIndex !== undefined && endpoint.vfIndex !== vf.vf)
  ) {
    return `the ack names it PF ${endpoint.pfIndex ?? '-'} VF ${endpoint.vfIndex ?? '-'}, but the inventory lists it as PF ${vf.pf} VF ${vf.vf}`;
  }
  return undefined;
}

/**
 * Why an agent cannot apply a port's VF settings (QoS, PF choice), or undefined when it can or the port
 * has none. Placement skips such agents; a port placed on one by name is refused before sending.
 */
function vfSettingsRefusal(s: AgentSession, key: string, port: PortFields): string | undefined {
  const needed = featuresNeeded(port);
  if (needed.length === 0) return undefined;
  if (s.version < 2) {
    return `DPU agent ${s.agentId} speaks protocol version ${s.version}, which carries no VF settings, but ${key} asks for ${needed.map(([, what]) => what).join(', ')}`;
  }
  for (const [feature, what] of needed) {
    if (!s.hasFeature(feature))
      return `DPU agent ${s.agentId} does not support ${what} (it does not advertise "${feature}"), which ${key} asks for`;
  }
  const inv = s.inventory;
  if (port.pf !== undefined && inv && !inv.hasPf(port.pf)) {
    return `DPU agent ${s.agentId} has no PF ${port.pf} (its PFs: ${inv.pfs.map((pf) => `${pf.index} ${pf.name}`).join(', ') || 'none'})`;
  }
  return undefined;
}

/** Where a port's host end belongs, kept with the port: its strings are copies of their own. */
function placementOf(a: AttachSpec | AttachmentView): WorkloadPlacement {
  const ips = a.ips.map((ip) => ({
    family: ip.family,
    address: ownString(ip.address),
    gateway: ownString(ip.gateway),
  }));
  return {
    netnsPath: ownString(a.netnsPath),
    netnsInode: a.netnsInode,
    ifName: ownString(a.ifName),
    mtu: a.mtu,
    ips,
    ...(a.defaultRoute === false ? { defaultRoute: false, routes: (a.routes ?? []).map(ownString) } : {}),
  };
}

function positive(what: string, v: number): number {
  if (!Number.isFinite(v) || v <= 0) {
    throw invalidArgument(`dpu ${what} must be a positive number of milliseconds, got ${v}`);
  }
  return v;
}

/**
 * Whether an ack names the endpoint already recorded: the same netdev, and the same MAC and VF where
 * both say.
 */
function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  if (a.netdev !== b.netdev) return false;
  if (a.mac && b.mac && a.mac.toLowerCase() !== b.mac.toLowerCase()) return false;
  if (a.pfIndex !== undefined && b.pfIndex !== undefined && a.pfIndex !== b.pfIndex) return false;
  return a.vfIndex === undefined || b.vfIndex === undefined || a.vfIndex === b.vfIndex;
}
