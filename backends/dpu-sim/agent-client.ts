import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  AckCode,
  ObjectKind,
  DpuAgentServiceClient,
  PortOperState,
  type Ack,
  type AgentMessage,
  type ControllerMessage,
  type FabricObject,
  type Inventory,
  type PeerState,
  type Port,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { AckDelivery } from './ack-delivery';
import { channelCredentials, type TlsFiles } from './channel-credentials';
import type { Dataplane, Uplink } from './dataplane';
import type { FaultInjector } from './fault-injection';
import { FABRIC_FEATURE, FABRIC_PROTOCOL_VERSION, FabricAgent } from './fabric-agent';
import type { FabricTable } from './fabric-table';
import type { PortTable } from './port-table';
import { SIM_MAX_MTU, SIM_MIN_MTU, unsupportedFeature, validatePort } from './port-validation';
import type { SessionInfo } from './state-file';
import type { VfPool } from './vf-pool';

// The agent's side of the protocol: dial the daemon, say hello, apply the snapshot and every change
// after it, ack each one, and keep the session alive with heartbeats. When the stream ends for any
// reason it dials again with exponential backoff, as a DPU that outlives many daemon restarts must.

/** The protocol versions the simulator speaks by default. */
export const PROTOCOL_VERSION = 3;

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

type Call = grpc.ClientDuplexStream<AgentMessage, ControllerMessage>;

interface Snapshot {
  epoch: number;
  seen: Set<string>;
  /** The daemon's store is new: ports the snapshot does not list are kept, not deleted. */
  keepUnlisted: boolean;
  seenFabric: Set<string>;
  /** The daemon's peer table is incomplete: fabric objects the snapshot does not list are kept. */
  keepUnlistedFabric: boolean;
}

export class AgentClient {
  private readonly client: DpuAgentServiceClient;
  private call: Call | undefined;
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
    return [...this.opts.dataplane.features, ...v2, ...v3].filter(
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
    this.call?.cancel();
    this.wake?.();
    this.client.close();
  }

  private setSession(info: SessionInfo): void {
    this.sessionInfo = info;
    this.opts.changed();
  }

  /** One stream from dial to end. Resolves with whether the hello was accepted. */
  private async runSession(): Promise<boolean> {
    const { log } = this.opts;
    const uplink = await this.fabricAgent.readUplink();
    return new Promise<boolean>((resolve) => {
      const call = this.client.connect();
      this.call = call;
      let accepted = false;
      let ended = false;
      // Intervals on the monotonic clock: a wall-clock step must not look like the daemon going silent
      // (core/monotonic-clock.ts says why; the simulator imports nothing of the core).
      let lastReceived = performance.now();
      let heartbeat: NodeJS.Timeout | undefined;
      let queue: Promise<void> = Promise.resolve();
      /** Acks leave in the order of their changes, each once its change is kept. */
      let acks: Promise<void> = Promise.resolve();
      this.snapshot = undefined;
      this.syncedValue = false;
      this.setSession({ state: 'connecting' });

      const end = (info: SessionInfo): void => {
        if (ended) return;
        ended = true;
        clearInterval(heartbeat);
        this.sendNow = undefined;
        this.versionValue = 0;
        clearTimeout(this.inventoryTimer);
        this.inventoryTimer = undefined;
        this.fabricAgent.ended();
        if (this.call === call) this.call = undefined;
        this.syncedValue = false;
        if (this.sessionInfo.state !== 'rejected') this.setSession(info);
        resolve(accepted);
      };

      // Writes are queued in order by the stream; only a crash has to wait for one to leave.
      const send = (msg: AgentMessage, flushed = false): Promise<void> => {
        if (ended) return Promise.resolve();
        if (!flushed) {
          call.write(msg);
          return Promise.resolve();
        }
        return new Promise((done) => call.write(msg, () => done()));
      };

      /** The drop-stream fault: the stream ends instead of the change being applied. */
      const dropStream = (what: Record<string, string>): void => {
        log.warn(what, 'fault injection: dropping the stream instead of applying a change');
        call.cancel();
      };

      const handle = async (msg: ControllerMessage): Promise<void> => {
        if (ended) return;
        if (msg.helloAccept) {
          accepted = true;
          const interval = Math.max(10, msg.helloAccept.heartbeatIntervalMs || 1000);
          // A version 1 daemon does not say; it speaks version 1.
          this.versionValue = msg.helloAccept.protocolVersion || 1;
          log.info(
            {
              sessionId: msg.helloAccept.sessionId,
              heartbeatIntervalMs: interval,
              version: this.versionValue,
              daemon: msg.helloAccept.capabilities,
            },
            'hello accepted',
          );
          this.sendNow = (m) => void send(m);
          this.setSession({ state: 'connected', sessionId: msg.helloAccept.sessionId });
          this.sendInventory();
          const daemonFeatures = msg.helloAccept.capabilities?.features;
          this.fabricAgent.started(this.versionValue, (m) => void send(m), daemonFeatures);
          let seq = 0;
          let lastTick = performance.now();
          heartbeat = setInterval(() => {
            const now = performance.now();
            // A late tick means this process stalled; the daemon's messages may be unread, not missing.
            const stalled = now - lastTick > 2 * interval;
            lastTick = now;
            if (!stalled && now - lastReceived > 3 * interval) {
              log.warn({ silenceMs: Math.round(now - lastReceived) }, 'the daemon went silent; reconnecting');
              call.cancel();
              return;
            }
            seq += 1;
            call.write({ heartbeat: { seq, sentAtUnixMs: Date.now() } });
            this.fabricAgent.tick();
          }, interval);
        } else if (msg.helloReject) {
          log.warn({ reason: msg.helloReject.reason }, 'hello rejected');
          this.rejections += 1;
          this.lastRejectReason = msg.helloReject.reason;
          this.setSession({ state: 'rejected', reason: msg.helloReject.reason });
        } else if (msg.snapshotBegin) {
          if (this.opts.ignoreSnapshot) return;
          this.snapshot = {
            epoch: msg.snapshotBegin.epoch,
            seen: new Set(),
            keepUnlisted: msg.snapshotBegin.keepUnlisted,
            seenFabric: new Set(),
            keepUnlistedFabric: msg.snapshotBegin.keepUnlistedFabric,
          };
          this.syncedValue = false;
          this.opts.changed();
        } else if (msg.upsert?.port) {
          if (this.opts.faults.onChange() === 'drop-stream')
            return dropStream({ port: msg.upsert.port.name });
          this.snapshot?.seen.add(msg.upsert.port.name);
          const ack = await this.applyUpsert(msg.upsert.port);
          acks = this.acks.after(acks, send, ack);
          if (this.opts.faults.shouldCrash()) await acks;
        } else if (msg.delete?.kind === ObjectKind.OBJECT_KIND_FABRIC) {
          if (this.opts.faults.onChange() === 'drop-stream') return dropStream({ object: msg.delete.name });
          const ack = await this.fabricAgent.delete(msg.delete.name, msg.delete.generation);
          acks = this.acks.after(acks, send, ack);
          if (this.opts.faults.shouldCrash()) await acks;
        } else if (msg.delete) {
          if (this.opts.faults.onChange() === 'drop-stream') return dropStream({ port: msg.delete.name });
          const ack = await this.applyDelete(msg.delete.name, msg.delete.generation);
          acks = this.acks.after(acks, send, ack);
          if (this.opts.faults.shouldCrash()) await acks;
        } else if (msg.syncComplete) {
          if (this.opts.ignoreSnapshot) return;
          await this.completeSync(
            msg.syncComplete.epoch,
            msg.syncComplete.portCount,
            msg.syncComplete.fabricCount,
            send,
          );
        }
      };

      /** The batch of fabric Upserts still waiting its turn: later ones join it. */
      let fabricBatch: FabricObject[] | undefined;
      /**
       * FabricObject Upserts received back to back, applied together (a snapshot's 10,000 in a few
       * batches), each acked with its own outcome; each still counts as one change for the faults.
       */
      const handleFabricUpserts = async (objects: FabricObject[]): Promise<void> => {
        if (fabricBatch === objects) fabricBatch = undefined;
        for (let next = 0; next < objects.length && !ended;) {
          const { run, drop, crash } = this.opts.faults.takeRun(objects, next);
          next += run.length + (drop ? 1 : 0);
          for (const o of run) this.snapshot?.seenFabric.add(o.name);
          const results = run.length > 0 ? await this.fabricAgent.upsert(run) : [];
          acks = this.acks.after(acks, send, results, crash);
          if (drop) return dropStream({ object: drop.name });
          if (crash) return acks;
        }
      };

      const enqueue = (run: () => Promise<void>): void => {
        queue = queue
          .then(() => (this.acks.crashing ? undefined : run()))
          .catch((err: unknown) => {
            log.error({ err: (err as Error).message }, 'failed to handle a daemon message');
          });
      };
      call.on('data', (msg: ControllerMessage) => {
        lastReceived = performance.now();
        const fabric = msg.upsert?.fabric;
        if (!fabric) {
          // Nothing received after this message may be handled before it.
          fabricBatch = undefined;
          enqueue(() => handle(msg));
        } else if (fabricBatch) fabricBatch.push(fabric);
        else {
          const batch = [fabric];
          fabricBatch = batch;
          enqueue(() => handleFabricUpserts(batch));
        }
      });
      call.on('error', (err: grpc.ServiceError) => {
        if (this.stopped) return end({ state: 'disconnected', reason: 'stopped' });
        const reason = `${grpc.status[err.code] ?? err.code}: ${err.details || err.message}`;
        log.warn({ reason }, 'stream ended');
        end({ state: 'disconnected', reason });
      });
      call.on('end', () => end({ state: 'disconnected', reason: 'the daemon ended the stream' }));
      call.on('status', (st: grpc.StatusObject) => {
        if (st.code === grpc.status.OK) end({ state: 'disconnected', reason: 'the daemon ended the stream' });
      });

      const { table, pool, protocol } = this.opts;
      const caps = {
        maxPorts: table.maxPorts ? Math.min(table.maxPorts, pool.total) : pool.total,
        ipv6: true,
        minMtu: SIM_MIN_MTU,
        maxMtu: SIM_MAX_MTU,
        features: this.features,
      };
      call.write({
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
    });
  }

  private async applyUpsert(port: Port): Promise<Ack> {
    const base = {
      name: port.name,
      generation: port.generation,
      retryable: false,
      message: '',
      kind: ObjectKind.OBJECT_KIND_PORT,
    };
    const invalid = validatePort(port);
    if (invalid) return { ...base, code: AckCode.ACK_CODE_INVALID, message: invalid };
    const { table, faults, dataplane, log } = this.opts;
    if (!table.hasRoomFor(port.name)) {
      return {
        ...base,
        code: AckCode.ACK_CODE_NO_RESOURCES,
        retryable: true,
        message: `port table full (${table.maxPorts} ports)`,
      };
    }
    const unsupported = unsupportedFeature(port, this.features);
    if (unsupported) return { ...base, code: AckCode.ACK_CODE_UNSUPPORTED, message: unsupported };
    const injected = faults.injectedError();
    if (injected) return { ...base, code: injected.code, message: injected.message };
    const previous = table.get(port.name);
    const { pool } = this.opts;
    const slot = pool.allocate(port.name, port.pf);
    if (!slot) {
      return {
        ...base,
        code: AckCode.ACK_CODE_NO_RESOURCES,
        retryable: true,
        message:
          port.pf === undefined
            ? `no free VF (all ${pool.total} in use)`
            : `no free VF on PF ${port.pf} (${pool.vfsPerPf} in use, or no such PF)`,
      };
    }
    try {
      const { endpoint, representor } = await dataplane.program(port, previous, pool.identity(slot));
      table.set({ port, endpoint, representor, vf: slot });
      this.inventoryChanged();
      this.opts.changed();
      log.debug(
        { port: port.name, generation: port.generation, endpoint: endpoint?.netdev, representor },
        'port programmed',
      );
      return { ...base, code: AckCode.ACK_CODE_OK, endpoint };
    } catch (err) {
      if (!previous) pool.release(port.name);
      log.warn({ port: port.name, err: (err as Error).message }, 'programming a port failed');
      return {
        ...base,
        code: AckCode.ACK_CODE_INTERNAL,
        retryable: true,
        message: `dataplane: ${(err as Error).message}`,
      };
    }
  }

  private async applyDelete(name: string, generation: number): Promise<Ack> {
    const base = { name, generation, retryable: false, message: '', kind: ObjectKind.OBJECT_KIND_PORT };
    const entry = this.opts.table.get(name);
    if (entry) {
      try {
        await this.opts.dataplane.remove(entry);
      } catch (err) {
        return {
          ...base,
          code: AckCode.ACK_CODE_INTERNAL,
          retryable: true,
          message: `dataplane: ${(err as Error).message}`,
        };
      }
      this.opts.table.delete(name);
      this.opts.pool.release(name);
      this.inventoryChanged();
      this.opts.changed();
    }
    // Deleting what is not there is success: the daemon's wish is already true.
    return { ...base, code: AckCode.ACK_CODE_OK };
  }

  private async completeSync(
    epoch: number,
    portCount: number,
    fabricCount: number,
    send: (m: AgentMessage) => Promise<void>,
  ): Promise<void> {
    const snap = this.snapshot;
    const { log, table, dataplane } = this.opts;
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
    if (this.versionValue >= FABRIC_PROTOCOL_VERSION) await this.fabricAgent.completeSync(snap);
    if (snap.keepUnlisted) {
      const kept = table.names().filter((n) => !snap.seen.has(n));
      if (kept.length > 0) {
        log.warn({ epoch, kept }, "the daemon's store is new: keeping ports the snapshot does not list");
      }
    }
    for (const name of snap.keepUnlisted ? [] : table.names()) {
      if (snap.seen.has(name)) continue;
      const entry = table.get(name);
      if (!entry) continue;
      try {
        await dataplane.remove(entry);
      } catch (err) {
        log.warn({ port: name, err: (err as Error).message }, 'could not remove a stale port');
        continue;
      }
      table.delete(name);
      this.opts.pool.release(name);
      this.inventoryChanged();
      log.info({ port: name }, 'stale port removed after sync');
      await send({
        portStatus: {
          name,
          operState: PortOperState.PORT_OPER_STATE_REMOVED,
          message: 'not in the snapshot',
        },
      });
    }
    if (!snap.keepUnlisted) await this.releaseAdopted(snap.seen);
    this.lastEpoch = epoch;
    this.syncedValue = true;
    this.opts.changed();
    log.info({ epoch, ports: table.size }, 'snapshot applied');
  }

  /** VFs kept from an earlier start (--keep-vfs) whose ports a whole snapshot did not list: gone. */
  private async releaseAdopted(listed: ReadonlySet<string>): Promise<void> {
    const { dataplane, table, pool } = this.opts;
    const gone = (await dataplane.releaseAdopted?.(listed)) ?? [];
    // A port that took another VF since holds that one in the pool now.
    for (const name of gone) if (!table.has(name)) pool.release(name);
    if (gone.length > 0) this.inventoryChanged();
  }
}
