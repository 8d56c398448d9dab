import type {
  AttachSpec,
  AttachmentView,
  Backend,
  BackendHealth,
  CheckScope,
  DataplaneResult,
  Drift,
  Placement,
  PlacementRequest,
  ReconcileOptions,
  ReconcileOutcome,
} from '../../core/backend';
import { invalidArgument, unavailable } from '../../core/errors';
import { KeyedMutex } from '../../lib/keyed-mutex';
import type { Netns } from '../../lib/netns/netns-handle';
import { silentLogger, type Logger } from '../../core/logger';
import { AckWaiter } from './ack-waiter';
import { AgentLink } from './agent-link';
import { MAX_AGENT_MESSAGE_BYTES } from './agent-message-limit';
import { DEFAULT_HEARTBEAT_INTERVAL_MS } from './heartbeat-gate';
import type { AgentSession } from './agent-session';
import { dpuHealth } from './agent-status';
import { AgentSync } from './agent-sync';
import { DesiredState } from './desired-state';
import { DpuFabric } from './dpu-fabric';
import { decodeDetails } from './details';
import { replumbRecreatedEndpoints } from './endpoint-replumb';
import { createHostSide, type HostSide } from './host-side';
import { KeepUnlisted } from './keep-unlisted';
import { restoreStoredPorts } from './stored-ports';
import type { AgentAdoption } from '../../core/reconcile/agent-adoption';
import { monotonicMs } from '../../lib/monotonic-clock';
import { workloadInterface, workloadRoutes } from '../interface/workload-side';
import { placeNewPort } from './placement';
import { setPortMtu } from './port-mtu';
import { attachPort } from './port-attach';
import { detachPort } from './port-detach';
import { macForKey, wireQos, type PortFields } from './port-spec';
import { DpuPolicy } from './policy/dpu-policy';
import { ObjectKind } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// The DPU backend: the core asks for a port, this backend places it on one of the connected agents
// (a node may carry several DPUs), turns it into desired state, hands it to that agent and waits for
// the agent to confirm it; then, if the agent exposes the port to the host as a netdev (a VF), it moves
// that netdev into the workload's namespace. It programs no packet path on the host itself: that is
// the DPU's job. A port stays on the agent it was placed on for its whole life. Attach and Detach
// themselves read top-down in port-attach.ts and port-detach.ts; here they get the port's lock.

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
  /** This node's name as the fabric's peer table names it (its DPUs' peers are "peer/<node>/<id>"). */
  nodeName?: string;
  logger?: Logger;
}

export { PROTOCOL_VERSION } from './hello-admission';
export { DEFAULT_HEARTBEAT_INTERVAL_MS, MAX_AGENT_MESSAGE_BYTES };

export class DpuBackend implements Backend {
  readonly name = 'dpu';
  private readonly log: Logger;
  private readonly ackTimeoutMs: number;
  private readonly desired = new DesiredState();
  private readonly acks = new AckWaiter();
  private readonly hostSide: HostSide;
  /** Serialises attach, detach and re-plumbing of one port. */
  private readonly locks = new KeyedMutex();
  private readonly link: AgentLink;
  /** Snapshots, changes and Deletes on their way to each agent, and what the agents answer. */
  private readonly sync: AgentSync;
  /** Which agents' snapshots keep the ports they do not list (a store new to them). */
  private readonly keep: KeepUnlisted;
  private startedAt = monotonicMs();
  private readonly startupAgentWaitMs: number;
  /** A daemon ran here before this start (its store existed): its agent is expected to reconnect. */
  private agentExpected = false;
  /** The node's overlay, carried by the agents that can (protocol version 3). */
  readonly fabric: DpuFabric;
  /** NetworkPolicy, enforced by the agents that can (protocol version 4). */
  readonly policy: DpuPolicy;

  constructor(private readonly opts: DpuBackendOptions) {
    this.log = opts.logger ?? silentLogger();
    this.ackTimeoutMs = positive('ackTimeoutMs', opts.ackTimeoutMs ?? 5000);
    const heartbeatIntervalMs = positive(
      'heartbeatIntervalMs',
      opts.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS,
    );
    const heartbeatTimeoutMs = positive(
      'heartbeatTimeoutMs',
      opts.heartbeatTimeoutMs ?? 3 * heartbeatIntervalMs,
    );
    if (heartbeatTimeoutMs <= heartbeatIntervalMs) {
      throw invalidArgument(
        `dpu heartbeatTimeoutMs (${heartbeatTimeoutMs}) must be longer than heartbeatIntervalMs (${heartbeatIntervalMs})`,
      );
    }
    this.startupAgentWaitMs = opts.startupAgentWaitMs ?? 15_000;
    this.hostSide = createHostSide(opts.hostNetnsPath, opts.linuxLinkGroups ?? [], this.log);
    // The link reports to the sync, which sends on the link: the events reach it once both exist.
    this.link = new AgentLink(
      {
        agentSocket: opts.agentSocket,
        agentListen: opts.agentListen,
        tls: opts.tls,
        maxMessageBytes: MAX_AGENT_MESSAGE_BYTES,
        maxAgents: opts.maxAgents ?? 16,
        timing: { heartbeatIntervalMs, heartbeatTimeoutMs },
        logger: this.log,
      },
      {
        established: (sess, previous) => this.sync.established(sess, previous),
        ack: (sess, ack) =>
          ack.kind === ObjectKind.OBJECT_KIND_POLICY ? this.policy.ack(sess, ack) : this.sync.ack(sess, ack),
        portStatus: (sess, ps) => this.sync.portStatus(sess, ps),
        inventory: (sess) => this.sync.inventory(sess),
        peerStatus: (sess, ps) => this.sync.peerStatus(sess, ps),
        lost: (sess, reason) => (this.policy.lost(sess, reason), this.sync.lost(sess, reason)),
      },
    );
    const replumb = {
      desired: this.desired,
      hostSide: this.hostSide,
      link: this.link,
      locks: this.locks,
      log: this.log,
    };
    this.sync = new AgentSync({
      link: this.link,
      desired: this.desired,
      acks: this.acks,
      ackTimeoutMs: this.ackTimeoutMs,
      log: this.log,
      replumb: (agentId) => replumbRecreatedEndpoints(replumb, agentId),
      // Only a whole snapshot ends a new store's doubt about the agent's unlisted ports (keep-unlisted.ts).
      synced: (agentId) => this.keep.snapshotApplied(agentId),
      keepsUnlisted: (agentId) => this.keep.keeps(agentId),
      established: (sess) => this.fabric.established(sess),
      policySnapshot: (sess) => this.policy.policySnapshot(sess),
    });
    this.policy = new DpuPolicy({
      link: this.link,
      desired: this.desired,
      ackTimeoutMs: this.ackTimeoutMs,
      log: this.log.child({ part: 'policy' }),
      snapshotSent: (sess) => this.sync.state(sess.agentId)?.sync?.sessionId === sess.id,
    });
    this.keep = new KeepUnlisted(this.log);
    this.fabric = new DpuFabric({
      node: opts.nodeName ?? '',
      link: this.link,
      sync: this.sync,
      log: this.log.child({ part: 'fabric' }),
    });
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
    if (!this.sync.primed) {
      throw unavailable(
        'the DPU backend has not restored its ports yet (start-up reconcile not done); retry shortly',
      );
    }
    const placedOn = this.desired.get(spec.key)?.agentId;
    await this.awaitRestartedAgent(placedOn ?? (spec.dpu || undefined));
    if (placedOn) return this.link.requireHealthy(placedOn);
    return this.link.requireHealthy(placeNewPort(spec, port, this.link, this.desired));
  }

  /**
   * Right after a restart of the daemon its agents are still reconnecting (their backoff): a call
   * that arrives then waits for its agent (or any, unnamed) a little, so that the restart is invisible
   * to runtimes. A first start (new store) and an agent seen since this start do not wait.
   */
  private async awaitRestartedAgent(target: string | undefined): Promise<void> {
    const waitLeft = this.startupAgentWaitMs - (monotonicMs() - this.startedAt);
    if (!this.agentExpected || waitLeft <= 0) return;
    const missing = target ? !this.link.sessionOf(target) : this.link.sessions().length === 0;
    if (missing) await this.link.waitForAgent(Math.min(waitLeft, this.ackTimeoutMs), target);
  }

  /**
   * The agent a new interface will be placed on, chosen before its address is allocated so that the
   * address comes from that agent's slices; the core passes it back as AttachSpec.dpu, which attach
   * honours. An interface already placed keeps its agent. Throws as attach would (UNAVAILABLE with no
   * healthy agent, RESOURCE_EXHAUSTED when all are full). Unlike attach it cannot wait for an agent
   * still reconnecting after a daemon restart: it waits for them as attach does.
   */
  async place(req: PlacementRequest): Promise<Placement> {
    if (!this.sync.primed) {
      throw unavailable(
        'the DPU backend has not restored its ports yet (start-up reconcile not done); retry shortly',
      );
    }
    const key = `${req.workloadId}/${req.ifName}`;
    const vf = { qos: wireQos(req.dpuPort), pf: req.dpuPort?.pf };
    const placedOn = this.desired.get(key)?.agentId;
    await this.awaitRestartedAgent(placedOn ?? (req.dpu || undefined));
    const dpu = placedOn ?? placeNewPort({ key, dpu: req.dpu }, vf, this.link, this.desired);
    // Only a DPU that carries the fabric owns slices: another one's pods are reachable on this node only.
    return this.sync.state(dpu)?.carriage.carries ? { dpu, endpoint: dpu } : { dpu };
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
    const { desired, sync, acks, ackTimeoutMs, hostSide, log } = this;
    const chooseAgent = (s: AttachSpec, port: PortFields): Promise<AgentSession> => this.chooseAgent(s, port);
    const deps = { desired, sync, acks, ackTimeoutMs, hostSide, log, chooseAgent };
    return this.locks.run(spec.key, () => attachPort(deps, spec, planned));
  }

  /** See port-mtu.ts. */
  setMtu(att: AttachmentView, netns: Netns, mtu: number): Promise<void> {
    return this.locks.run(att.key, async () => {
      const { desired, sync, link, acks, ackTimeoutMs } = this;
      const awaitAgent = (id: string): Promise<void> => this.awaitRestartedAgent(id);
      const deps = { desired, sync, link, acks, ackTimeoutMs, awaitAgent };
      const change = await setPortMtu(deps, att, netns, mtu);
      if (change.before !== mtu || change.routes > 0)
        this.log.info(
          { key: att.key, from: change.before, to: mtu, routes: change.routes },
          'interface MTU changed in place',
        );
    });
  }

  detach(att: AttachmentView): Promise<void> {
    const { desired, sync, hostSide, log } = this;
    return this.locks.run(att.key, () => detachPort({ desired, sync, hostSide, log }, att));
  }

  async check(att: AttachmentView, scope: CheckScope = 'full'): Promise<Drift[]> {
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
    if (endpoint) drift.push(...(await this.hostSide.inspect(att, scope)));
    return drift;
  }

  async reconcile(
    atts: AttachmentView[],
    opts: ReconcileOptions & { adoption?: AgentAdoption } = { storeIsNew: false },
  ): Promise<ReconcileOutcome> {
    const outcome: ReconcileOutcome = { orphansRemoved: [], missing: [], healthy: [], warnings: [] };
    // A store that existed before this start means a daemon ran here before, with its agent.
    this.agentExpected = !opts.storeIsNew;
    if (opts.storeIsNew) {
      outcome.warnings.push(
        'the store is new: DPU agents are asked to keep ports this daemon does not list (they may belong ' +
          'to running workloads whose state was lost); see "A lost state store" in docs/troubleshooting.md',
      );
    }
    const withEndpoint = restoreStoredPorts(atts, this.desired, outcome);
    // The agent's side is repaired by the snapshot; only the host side can be checked here. A port whose
    // workload interface is gone is reported missing so the core repairs it (or releases it when the
    // namespace went away with its workload). Only presence is asked: nothing else is acted on here.
    for (const att of withEndpoint) {
      const drift = await this.hostSide.inspect(att, 'presence');
      if (drift.some((d) => d.kind === 'interface-missing' || d.kind === 'netns-missing'))
        outcome.missing.push(att.key);
      else outcome.healthy.push(att.key);
    }
    // Only now may a snapshot go out: before this point it would have told the agent to drop ports.
    this.keep.restored(opts.storeIsNew, opts.adoption);
    let sessions = this.sync.prime();
    if (sessions.length === 0 && outcome.missing.length > 0) {
      // The core repairs missing ports right after this returns, which needs an agent; one that is
      // reconnecting after our restart usually gets here within its backoff.
      const s = await this.link.waitForAgent(this.ackTimeoutMs);
      sessions = s ? [s] : [];
    }
    await this.sync.awaitSnapshots(sessions, outcome.warnings);
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
    return dpuHealth({
      agentSocket: this.opts.agentSocket,
      agentListen: this.opts.agentListen,
      desired: this.desired,
      acks: this.acks,
      link: this.link,
      sync: this.sync,
      fabric: (agentId) => this.fabric.dpuStatus(agentId),
      fabricWaiting: (agentId) => this.fabric.waiting(agentId),
    });
  }
}

function positive(what: string, v: number): number {
  if (!Number.isFinite(v) || v <= 0) {
    throw invalidArgument(`dpu ${what} must be a positive number of milliseconds, got ${v}`);
  }
  return v;
}
