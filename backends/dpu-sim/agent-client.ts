import * as fs from 'node:fs';
import * as net from 'node:net';
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
  type Inventory,
  type Port,
  Toggle,
  VfLinkState,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { Dataplane } from './dataplane';
import type { FaultInjector } from './fault-injection';
import type { PortTable } from './port-table';
import type { SessionInfo } from './state-file';
import type { VfPool } from './vf-pool';

// The agent's side of the protocol: dial the daemon, say hello, apply the snapshot and every change
// after it, ack each one, and keep the session alive with heartbeats. When the stream ends for any
// reason it dials again with exponential backoff, as a DPU that outlives many daemon restarts must.

/** The protocol versions the simulator speaks by default. */
export const PROTOCOL_VERSION = 2;
export const MIN_PROTOCOL_VERSION = 1;
/** Version 2 features the simulator implements (it records QoS; netns mode enforces the rate). */
export const SIM_V2_FEATURES = ['qos-rate', 'qos-spoof-check', 'qos-trust', 'qos-link-state', 'pf-select'];
/** Inventory changes (free VFs) are sent at most this often. */
const INVENTORY_COALESCE_MS = 1000;
/** Limits the simulator claims in its hello. */
export const SIM_MIN_MTU = 68;
export const SIM_MAX_MTU = 9216;

export interface AgentClientOptions {
  /** "unix:/path" or "host:port". */
  controller: string;
  agentId: string;
  bootId: string;
  tls?: { cert: string; key: string; ca: string; serverName?: string };
  /** Treat SnapshotBegin/SyncComplete as unknown (an agent that never removes stale ports). */
  ignoreSnapshot: boolean;
  backoffMaxMs: number;
  table: PortTable;
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

  constructor(private readonly opts: AgentClientOptions) {
    this.client = new DpuAgentServiceClient(opts.controller, credentials(opts), {
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

  /** Features the hello advertises. */
  get features(): string[] {
    const v2 = this.opts.protocol.max >= 2 ? SIM_V2_FEATURES : [];
    return [...this.opts.dataplane.features, ...v2].filter((f) => !this.opts.withoutFeatures.includes(f));
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
  private runSession(): Promise<boolean> {
    const { log } = this.opts;
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
          };
          this.syncedValue = false;
          this.opts.changed();
        } else if (msg.upsert?.port) {
          if (this.opts.faults.onChange() === 'drop-stream') {
            log.warn(
              { port: msg.upsert.port.name },
              'fault injection: dropping the stream instead of applying a change',
            );
            call.cancel();
            return;
          }
          this.snapshot?.seen.add(msg.upsert.port.name);
          const ack = await this.applyUpsert(msg.upsert.port);
          acks = this.ackWhenKept(acks, send, ack);
          if (this.opts.faults.shouldCrash()) await acks;
        } else if (msg.delete) {
          if (this.opts.faults.onChange() === 'drop-stream') {
            log.warn(
              { port: msg.delete.name },
              'fault injection: dropping the stream instead of applying a change',
            );
            call.cancel();
            return;
          }
          const ack = await this.applyDelete(msg.delete.name, msg.delete.generation);
          acks = this.ackWhenKept(acks, send, ack);
          if (this.opts.faults.shouldCrash()) await acks;
        } else if (msg.syncComplete) {
          if (this.opts.ignoreSnapshot) return;
          await this.completeSync(msg.syncComplete.epoch, msg.syncComplete.portCount, send);
        }
      };

      call.on('data', (msg: ControllerMessage) => {
        lastReceived = performance.now();
        queue = queue
          .then(() => handle(msg))
          .catch((err: unknown) => {
            log.error({ err: (err as Error).message }, 'failed to handle a daemon message');
          });
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
          uplinkAddresses: [],
          uplinkMtu: 0,
        },
      });
    });
  }

  /**
   * Sends `ack` after the acks before it (`prev`), once its change is kept: an agent killed before its
   * state file holds a change must not have acked it, or a restart of the same boot would bring back a
   * port whose Delete the daemon already counts as done. Waiting holds up this ack, not the next change.
   * The crash fault is decided now, for this change, and the process exits right after its ack.
   */
  private ackWhenKept(
    prev: Promise<void>,
    send: (m: AgentMessage, flushed?: boolean) => Promise<void>,
    ack: Ack,
  ): Promise<void> {
    const crash = this.opts.faults.shouldCrash();
    const kept = this.opts.kept();
    const deliver = async (): Promise<void> => {
      await send({ ack }, crash);
      if (crash) {
        this.opts.log.warn({ port: ack.name }, 'fault injection: crashing after acking a change');
        this.opts.crash();
      }
    };
    const delay = this.opts.faults.ackLatencyMs;
    return Promise.all([prev, kept]).then(() => {
      // Latency delays the ack, not the next change: a slow agent still works through its queue.
      if (delay > 0) setTimeout(() => void deliver(), delay);
      else return deliver();
      return undefined;
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
    const unsupported = this.unsupportedBy(port);
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

  /** What in the port needs a feature this agent does not advertise (a daemon should not send it). */
  private unsupportedBy(port: Port): string | undefined {
    const has = (f: string): boolean => this.features.includes(f);
    const q = port.qos;
    if (port.pf !== undefined && !has('pf-select'))
      return 'PF selection (feature "pf-select") is not supported';
    if (!q) return undefined;
    if ((q.maxTxRateMbps || q.minTxRateMbps) && !has('qos-rate'))
      return 'transmit rates (feature "qos-rate") are not supported';
    if (q.spoofCheck !== Toggle.TOGGLE_UNSPECIFIED && !has('qos-spoof-check'))
      return 'spoof check (feature "qos-spoof-check") is not supported';
    if (q.trust !== Toggle.TOGGLE_UNSPECIFIED && !has('qos-trust'))
      return 'trust (feature "qos-trust") is not supported';
    if (q.linkState !== VfLinkState.VF_LINK_STATE_UNSPECIFIED && !has('qos-link-state'))
      return 'VF link state (feature "qos-link-state") is not supported';
    if (q.minTxRateMbps && q.maxTxRateMbps && q.minTxRateMbps > q.maxTxRateMbps)
      return `min_tx_rate ${q.minTxRateMbps} is above max_tx_rate ${q.maxTxRateMbps}`;
    return undefined;
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
    this.lastEpoch = epoch;
    this.syncedValue = true;
    this.opts.changed();
    log.info({ epoch, ports: table.size }, 'snapshot applied');
  }
}

function credentials(opts: AgentClientOptions): grpc.ChannelCredentials {
  if (!opts.tls) return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(
    fs.readFileSync(opts.tls.ca),
    fs.readFileSync(opts.tls.key),
    fs.readFileSync(opts.tls.cert),
  );
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;

/** Why a port cannot be programmed as described, or undefined when it can. */
export function validatePort(port: Port): string | undefined {
  if (!port.name) return 'port name is empty';
  if (!MAC.test(port.mac)) return `MAC ${JSON.stringify(port.mac)} is not of the form 02:00:00:00:00:01`;
  const first = Number.parseInt(port.mac.slice(0, 2), 16);
  if (first & 1) return `MAC ${port.mac} is a multicast address`;
  if (port.mtu < SIM_MIN_MTU || port.mtu > SIM_MAX_MTU)
    return `MTU ${port.mtu} is outside ${SIM_MIN_MTU}-${SIM_MAX_MTU}`;
  if (port.vlan > 4094) return `VLAN ${port.vlan} is outside 0-4094`;
  if (port.vni > 0xffffff) return `VNI ${port.vni} does not fit in 24 bits`;
  for (const cidr of port.ips) {
    const [addr, len, ...rest] = cidr.split('/');
    const family = net.isIP(addr ?? '');
    const bits = Number(len);
    if (rest.length || !family || !Number.isInteger(bits) || bits < 0 || bits > (family === 4 ? 32 : 128)) {
      return `address ${JSON.stringify(cidr)} is not a CIDR`;
    }
  }
  return undefined;
}
