import type { Logger } from 'pino';
import {
  DpuAgentServiceClient,
  type AgentMessage,
  type Inventory,
  type PeerState,
  type SnapshotBegin,
  type SyncComplete,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { AckDelivery } from './ack-delivery';
import { channelCredentials, type TlsFiles } from './channel-credentials';
import type { Dataplane, Uplink } from './dataplane';
import type { FaultInjector } from './fault-injection';
import { FABRIC_FEATURE, FABRIC_PROTOCOL_VERSION, FabricAgent } from './fabric-agent';
import type { FabricTable } from './fabric-table';
import type { PortTable } from './port-table';
import { AgentSession, type SessionHooks, type SessionSend } from './agent-session';
import { PortAgent } from './port-agent';
import { POLICY_FEATURE, POLICY_PROTOCOL_VERSION, PolicyAgent } from './policy-agent';
import { SIM_MAX_MTU, SIM_MIN_MTU } from './port-validation';
import type { SessionInfo } from './state-file';
import type { VfPool } from './vf-pool';

// The agent's side of the protocol: dial the daemon, say hello, apply the snapshot and every change
// after it, ack each one, and keep the session alive with heartbeats. When the stream ends for any
// reason it dials again with exponential backoff, as a DPU that outlives many daemon restarts must.
// One stream is agent-session.ts; the ports and the fabric objects are port-agent.ts and
// fabric-agent.ts; this file keeps what outlives a stream (the session's state, the snapshot, the
// inventory) and the reconnect loop.

/** The protocol versions the simulator speaks by default. */
export const PROTOCOL_VERSION = 4;

export const MIN_PROTOCOL_VERSION = 1;
/** Version 2 features the simulator implements (it records QoS; netns mode enforces the rate). */
export const SIM_V2_FEATURES = ['qos-rate', 'qos-spoof-check', 'qos-trust', 'qos-link-state', 'pf-select'];
/** Inventory changes (free VFs) are sent at most this often. */
const INVENTORY_COALESCE_MS = 1000;
export { SIM_MAX_MTU, SIM_MIN_MTU, validatePort } from './port-validation';

export interface AgentClientOptions {
  /** "unix:/path" or "host:port". */
  controller: string;
  agentId: string;
  bootId: string;
  tls?: TlsFiles;
  /** Treat SnapshotBegin/SyncComplete as unknown (an agent that never removes stale ports). */
  ignoreSnapshot: boolean;
  backoffMaxMs: number;
  table: PortTable;
  /** The fabric objects held (protocol version 3). */
  fabric: FabricTable;
  pool: VfPool;
  /** The version range offered in the hello. */
  protocol: { min: number; max: number };
  /** Features not to advertise (and to refuse), to play an older or smaller agent. */
  withoutFeatures: string[];
  dataplane: Dataplane;
  faults: FaultInjector;
  /** Called after every change of the table or the session, to persist them. */
  changed: () => void;
  /**
   * Resolves once every change so far would survive a restart of this boot (is in the state file):
   * an ack waits for it, since the daemon takes an ack as the change done for good.
   */
  kept: () => Promise<void>;
  /** Exits the process (the crash fault); the caller flushes state first. */
  crash: () => void;
  log: Logger;
}

interface Snapshot {
  epoch: number;
  seen: Set<string>;
  /** The daemon's store is new: ports the snapshot does not list are kept, not deleted. */
  keepUnlisted: boolean;
  seenFabric: Set<string>;
  /** The daemon's peer table is incomplete: fabric objects the snapshot does not list are kept. */
  keepUnlistedFabric: boolean;
  seenPolicy: Set<string>;
  /** The daemon does not know its policy yet: policy objects the snapshot does not list are kept. */
  keepUnlistedPolicy: boolean;
}

export class AgentClient {
  private readonly client: DpuAgentServiceClient;
  private current: AgentSession | undefined;
  private stopped = false;
  private backoffMs = 0;
  private sessionInfo: SessionInfo = { state: 'connecting' };
  private rejections = 0;
  private lastRejectReason: string | undefined;
  private syncedValue = false;
  private lastEpoch = 0;
  private snapshot: Snapshot | undefined;
  private wake: (() => void) | undefined;
  private versionValue = 0;
  private inventoriesSent = 0;
  private lastInventory: Inventory | undefined;
  private inventoryTimer: NodeJS.Timeout | undefined;
  /** Sends on the current session, while there is one. */
  private sendNow: ((m: AgentMessage) => void) | undefined;
  private readonly acks: AckDelivery;
  private readonly fabricAgent: FabricAgent;
  private readonly ports: PortAgent;
  /** NetworkPolicy (protocol version 4), when the dataplane enforces it and it is offered. */
  private readonly policy: PolicyAgent | undefined;

  constructor(private readonly opts: AgentClientOptions) {
    this.acks = new AckDelivery(opts);
    this.fabricAgent = new FabricAgent({
      table: opts.fabric,
      dataplane: opts.dataplane.fabric,
      // Version 3 in the range offered, a dataplane that can program it, and not switched off.
      carries:
        opts.protocol.max >= FABRIC_PROTOCOL_VERSION &&
        opts.dataplane.fabric !== undefined &&
        !opts.withoutFeatures.includes(FABRIC_FEATURE),
      changed: opts.changed,
      log: opts.log,
    });
    const enforcer = opts.dataplane.policy;
    this.policy =
      enforcer &&
      opts.protocol.max >= POLICY_PROTOCOL_VERSION &&
      !opts.withoutFeatures.includes(POLICY_FEATURE)
        ? new PolicyAgent(enforcer, opts.table, opts.log)
        : undefined;
    this.ports = new PortAgent({
      ...opts,
      portsChanged: this.policy ? () => this.policy?.portsChanged() ?? Promise.resolve() : undefined,
      features: () => this.features,
      inventoryChanged: () => this.inventoryChanged(),
    });
    this.client = new DpuAgentServiceClient(opts.controller, channelCredentials(opts.tls), {
      'grpc.max_receive_message_length': 16 * 1024 * 1024,
      ...(opts.tls?.serverName ? { 'grpc.ssl_target_name_override': opts.tls.serverName } : {}),
    });
  }

  get session(): SessionInfo {
    return { ...this.sessionInfo, rejections: this.rejections, lastRejectReason: this.lastRejectReason };
  }

  get synced(): boolean {
    return this.syncedValue;
  }

  get epoch(): number {
    return this.lastEpoch;
  }

  get protocolVersion(): number {
    return this.versionValue;
  }

  get inventoryInfo(): { sent: number; last: Inventory | undefined } {
    return { sent: this.inventoriesSent, last: this.lastInventory };
  }

  get peerStatusInfo(): { sent: number; last: PeerState[] | undefined } {
    return this.fabricAgent.peerStatusInfo;
  }

  /** The uplink the last hello stated (undefined: none, the agent carries no fabric). */
  get uplink(): Uplink | undefined {
    return this.fabricAgent.uplink;
  }

  /** Features the hello advertises. */
  get features(): string[] {
    const v2 = this.opts.protocol.max >= 2 ? SIM_V2_FEATURES : [];
    const v3 = this.fabricAgent.carries ? [FABRIC_FEATURE] : [];
    const v4 = this.policy ? [POLICY_FEATURE] : [];
    return [...this.opts.dataplane.features, ...v2, ...v3, ...v4].filter(
      (f) => !this.opts.withoutFeatures.includes(f),
    );
  }

  private sendInventory(): void {
    if (!this.sendNow || this.versionValue < 2) return;
    const inv = this.opts.pool.inventory();
    this.lastInventory = inv;
    this.inventoriesSent += 1;
    this.sendNow({ inventory: inv });
    this.opts.changed();
  }

  /** The pool changed: tell the daemon soon, once for a burst of changes. */
  private inventoryChanged(): void {
    if (this.inventoryTimer || this.versionValue < 2) return;
    this.inventoryTimer = setTimeout(() => {
      this.inventoryTimer = undefined;
      this.sendInventory();
    }, INVENTORY_COALESCE_MS);
  }

  /** Runs sessions until stop() is called. */
  async run(): Promise<void> {
    while (!this.stopped) {
      const started = performance.now();
      const accepted = await this.runSession();
      if (this.stopped) break;
      // A session that got going resets the backoff; one refused or dropped at once does not.
      if (accepted && performance.now() - started > 1000) this.backoffMs = 0;
      this.backoffMs = Math.min(this.opts.backoffMaxMs, this.backoffMs ? this.backoffMs * 2 : 100);
      const delay = Math.round(this.backoffMs * (0.8 + Math.random() * 0.4));
      this.opts.log.debug({ delayMs: delay }, 'reconnecting after backoff');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, delay);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = undefined;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.current?.cancel();
    this.wake?.();
    this.client.close();
  }

  private setSession(info: SessionInfo): void {
    this.sessionInfo = info;
    this.opts.changed();
  }

  /** One stream from dial to end. Resolves with whether the hello was accepted. */
  private async runSession(): Promise<boolean> {
    const uplink = await this.fabricAgent.readUplink();
    const session = new AgentSession(this.client, this.sessionHooks());
    this.current = session;
    this.snapshot = undefined;
    this.syncedValue = false;
    this.setSession({ state: 'connecting' });
    const { table, pool, protocol } = this.opts;
    const caps = {
      maxPorts: table.maxPorts ? Math.min(table.maxPorts, pool.total) : pool.total,
      ipv6: true,
      minMtu: SIM_MIN_MTU,
      maxMtu: SIM_MAX_MTU,
      features: this.features,
    };
    return session.run({
      hello: {
        agentId: this.opts.agentId,
        bootId: this.opts.bootId,
        // What a daemon that reads no range (version 1) takes: the oldest version offered.
        protocolVersion: protocol.min,
        minProtocolVersion: protocol.min === protocol.max ? 0 : protocol.min,
        maxProtocolVersion: protocol.min === protocol.max ? 0 : protocol.max,
        capabilities: caps,
        uplinkAddresses: uplink?.addresses ?? [],
        uplinkMtu: uplink?.mtu ?? 0,
      },
    });
  }

  /** What a session changes here as it goes. */
  private sessionHooks(): SessionHooks {
    const { log, faults, ignoreSnapshot } = this.opts;
    return {
      log,
      faults,
      ignoreSnapshot,
      acks: this.acks,
      ports: this.ports,
      fabric: this.fabricAgent,
      // A session below version 4 is sent no policy; one that is anyway gets UNSUPPORTED.
      policy: () => (this.versionValue >= POLICY_PROTOCOL_VERSION ? this.policy : undefined),
      accepted: (accept, version, send) => {
        this.versionValue = version;
        this.sendNow = (m) => void send(m);
        this.setSession({ state: 'connected', sessionId: accept.sessionId });
        this.sendInventory();
        this.fabricAgent.started(version, (m) => void send(m), accept.capabilities?.features);
      },
      rejected: (reason) => {
        log.warn({ reason }, 'hello rejected');
        this.rejections += 1;
        this.lastRejectReason = reason;
        this.setSession({ state: 'rejected', reason });
      },
      snapshotBegun: (begin) => this.snapshotBegun(begin),
      listed: (kind, name) =>
        (kind === 'port'
          ? this.snapshot?.seen
          : kind === 'fabric'
            ? this.snapshot?.seenFabric
            : this.snapshot?.seenPolicy
        )?.add(name),
      syncComplete: (done, send) => this.completeSync(done, send),
      ended: (info, session) => {
        this.sendNow = undefined;
        this.versionValue = 0;
        clearTimeout(this.inventoryTimer);
        this.inventoryTimer = undefined;
        this.fabricAgent.ended();
        if (this.current === session) this.current = undefined;
        this.syncedValue = false;
        if (this.sessionInfo.state !== 'rejected') this.setSession(info);
      },
      stopped: () => this.stopped,
    };
  }

  private snapshotBegun(begin: SnapshotBegin): void {
    this.snapshot = {
      epoch: begin.epoch,
      seen: new Set(),
      keepUnlisted: begin.keepUnlisted,
      seenFabric: new Set(),
      keepUnlistedFabric: begin.keepUnlistedFabric,
      seenPolicy: new Set(),
      keepUnlistedPolicy: begin.keepUnlistedPolicy ?? false,
    };
    this.syncedValue = false;
    this.opts.changed();
  }

  private async completeSync(done: SyncComplete, send: SessionSend): Promise<void> {
    const { epoch, portCount, fabricCount } = done;
    const snap = this.snapshot;
    const { log, table } = this.opts;
    if (!snap || snap.epoch !== epoch) {
      log.warn({ epoch }, 'SyncComplete without a matching SnapshotBegin; keeping every port');
      return;
    }
    this.snapshot = undefined;
    if (snap.seen.size !== portCount) {
      // A truncated snapshot would make us delete ports the daemon still wants.
      log.warn(
        { epoch, expected: portCount, received: snap.seen.size },
        'snapshot incomplete; keeping every port',
      );
      return;
    }
    if (this.versionValue >= FABRIC_PROTOCOL_VERSION && snap.seenFabric.size !== fabricCount) {
      log.warn(
        { epoch, expected: fabricCount, received: snap.seenFabric.size },
        'snapshot incomplete; keeping every port and fabric object',
      );
      return;
    }
    const policyCount = done.policyCount ?? 0;
    if (this.versionValue >= POLICY_PROTOCOL_VERSION && snap.seenPolicy.size !== policyCount) {
      log.warn(
        { epoch, expected: policyCount, received: snap.seenPolicy.size },
        'snapshot incomplete; keeping every port, fabric and policy object',
      );
      return;
    }
    if (this.versionValue >= FABRIC_PROTOCOL_VERSION) await this.fabricAgent.completeSync(snap);
    if (this.versionValue >= POLICY_PROTOCOL_VERSION)
      await this.policy?.completeSync(snap.seenPolicy, snap.keepUnlistedPolicy);
    await this.ports.completeSync(snap, send);
    this.lastEpoch = epoch;
    this.syncedValue = true;
    this.opts.changed();
    log.info({ epoch, ports: table.size }, 'snapshot applied');
  }
}
