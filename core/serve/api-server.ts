import { parseAttachmentKey } from '../attachment-key';
import * as net from 'node:net';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import {
  Attachment as ProtoAttachmentCodec,
  ListResponse,
  WorkloadNetworkingService,
  type AttachRequest,
  type AttachResponse,
  type Attachment as ProtoAttachment,
  type CheckRequest,
  type CheckResponse,
  type DetachRequest,
  type DetachResponse,
  type FabricStatus as ProtoFabricStatus,
  type GCRequest,
  type GCResponse,
  type GetRequest,
  type GetResponse,
  type ListRequest,
  type PoolStatus,
  type StatusRequest,
  type StatusResponse,
  type VfSettings,
  type WorkloadNetworkingServer,
} from '../../proto/gen/workloadnet/v1/workload';
import type { DpuPortOptions } from '../backend';
import { addressToBytes } from '../../lib/cidr';
import { DEFAULT_NETWORK } from '../config';
import { ConnectionCap } from './connection-cap';
import { asWorkloadNetError, invalidArgument, knownWorkloadNetError, unavailable } from '../errors';
import type { Logger } from '../logger';
import { LogRate } from '../log-rate';
import { listenOnSocket } from './unix-socket';
import type { Attachment, PoolUsage, WorkloadService } from '../workload-service';
import type { FabricStatus } from '../fabric-status';

/** The original contract's service name, served too so that its clients connect unchanged. */
export const SEED_SERVICE = 'metropolis.node.core.network.workloads.WorkloadNetworking';
const OWN_SERVICE = 'workloadnet.v1.WorkloadNetworking';

/** Largest request we accept; the API's messages are small, so anything bigger is hostile or broken. */
export const MAX_MESSAGE_BYTES = 1024 * 1024;

export const VERSION = '0.1.0';

const PROTO_DIR = path.resolve(__dirname, '..', '..', '..', 'proto');

export interface ApiServerLimits {
  /** Connections held at once; at the cap the one silent longest is closed to make room. */
  maxConnections: number;
  /** A connection without calls for this long is closed (the client reconnects when it needs to). */
  idleTimeoutMs: number;
}

export const API_LIMIT_DEFAULTS: ApiServerLimits = { maxConnections: 512, idleTimeoutMs: 60_000 };

export class ApiServer {
  private readonly server: grpc.Server;
  /**
   * grpc-js has no cap on connections, so the daemon accepts them itself, on a net.Server it owns,
   * and hands each one to grpc-js through a connection injector.
   */
  private listener?: net.Server;
  private injector?: ReturnType<grpc.Server['createConnectionInjector']>;
  private readonly cap: ConnectionCap;
  private readonly limitLog = new LogRate();
  private readonly health = new HealthImplementation({
    '': 'NOT_SERVING',
    [OWN_SERVICE]: 'NOT_SERVING',
    [SEED_SERVICE]: 'NOT_SERVING',
  });

  constructor(
    private readonly service: WorkloadService,
    private readonly log: Logger,
    private readonly limits: ApiServerLimits = API_LIMIT_DEFAULTS,
  ) {
    this.server = new grpc.Server({
      'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
      'grpc.max_send_message_length': 64 * MAX_MESSAGE_BYTES,
      // Without a bound, a client's burst of a thousand calls is admitted in one event-loop turn and
      // Status waits behind all of them. 32 streams per connection match the attaches the core runs at
      // once (measurements in docs/benchmarks.md, "Why the code is shaped this way").
      'grpc.max_concurrent_streams': 32,
      // An idle connection is a descriptor held for nothing: close it (GOAWAY; clients reconnect).
      'grpc.max_connection_idle_ms': limits.idleTimeoutMs,
      // Ping clients that hold a connection open, and drop those that no longer answer.
      'grpc.keepalive_time_ms': 30_000,
      'grpc.keepalive_timeout_ms': 10_000,
    });
    // grpc-js does not say which connections carry calls, so at the cap the connection that has been
    // silent longest makes room: a flood of connections that never call goes first, and a client
    // whose call is cut (silent longer than every flood connection) sees UNAVAILABLE and retries.
    this.cap = new ConnectionCap(limits.maxConnections, { evictable: () => true });
    const handlers = this.handlers(false);
    this.server.addService(LIST_SERVICE, handlers);
    this.server.addService(renamed(LIST_SERVICE, SEED_SERVICE), this.handlers(true));
    this.health.addToServer(this.server);
    const pkg = protoLoader.loadSync(['workloadnet/v1/workload.proto'], { includeDirs: [PROTO_DIR] });
    new ReflectionService(pkg).addToServer(this.server);
  }

  /** Binds the socket; the caller has cleared a stale one with prepareSocketPath (core/serve/unix-socket.ts). */
  async listen(socketPath: string, group: string): Promise<void> {
    const injector = this.server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
    const listener = net.createServer((socket) => {
      const outcome = this.cap.admit(socket);
      if (outcome !== 'refused') injector.injectConnection(socket);
      if (outcome === 'admitted') return;
      const n = this.limitLog.take('cap');
      if (n !== undefined) {
        this.log.warn(
          { limit: this.limits.maxConnections, occurrences: n, outcome },
          outcome === 'refused'
            ? 'API connection limit reached: every connection is busy; new connection refused'
            : 'API connection limit reached: closed the connection silent longest to make room',
        );
      }
    });
    await listenOnSocket(listener, socketPath, 'API', { group });
    listener.on('error', (err) => this.log.error({ err: err.message }, 'API socket error'));
    this.listener = listener;
    this.injector = injector;
  }

  /** Tells health clients whether Attach can succeed now. */
  setServing(serving: boolean): void {
    const s = serving ? 'SERVING' : 'NOT_SERVING';
    for (const name of ['', OWN_SERVICE, SEED_SERVICE]) this.health.setStatus(name, s);
  }

  /**
   * Stops accepting connections and calls; idle connections are told to go at once (GOAWAY), calls in
   * flight may finish within `graceMs`, then every connection is closed.
   */
  async close(graceMs = 5000): Promise<void> {
    this.setServing(false);
    const listener = this.listener;
    this.listener = undefined;
    const closed = listener ? new Promise<void>((resolve) => listener.close(() => resolve())) : undefined;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      timer.unref();
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    this.injector?.destroy();
    this.cap.destroyAll();
    await closed;
  }

  private handlers(seed: boolean): WorkloadNetworkingServer {
    const s = this.service;
    return {
      attach: this.unary<AttachRequest, AttachResponse>('Attach', async (req) => {
        const att = await s.attach({
          workloadId: req.workloadId,
          netnsPath: req.netns?.netnsPath ?? '',
          ifName: req.netns?.ifName ?? '',
          mtu: req.netns?.mtu || undefined,
          containerId: req.containerId || undefined,
          network: req.network || undefined,
          pod: req.pod,
          dns: req.dns
            ? {
                nameservers: req.dns.nameservers,
                search: req.dns.search,
                options: req.dns.options,
                domain: req.dns.domain || undefined,
              }
            : undefined,
          dpu: req.dpu || undefined,
          dpuPort: fromVfSettings(req.vf),
        });
        return toAttachResponse(att);
      }),
      detach: this.unary<DetachRequest, DetachResponse>('Detach', async (req) => {
        await s.detach({
          workloadId: req.workloadId,
          netnsPath: req.netns?.netnsPath,
          ifName: req.netns?.ifName || undefined,
        });
        return {};
      }),
      status: this.unary<StatusRequest, StatusResponse>('Status', async (req) => {
        const st = await s.status({ fabricPeers: !req.omitFabricPeers });
        // The original contract's StatusResponse has no fields, so its clients learn "not ready" only
        // from an error code.
        if (seed && !st.ready) throw unavailable(`not ready: ${st.reasons.join('; ')}`);
        return {
          ready: st.ready,
          reasons: st.reasons,
          backend: st.backend,
          backendDetails: Object.fromEntries(
            Object.entries(st.backendDetails).map(([k, v]) => [k, String(v)]),
          ),
          pools: st.pools.map(toProtoPool),
          poolSource: st.poolSource && {
            ...st.poolSource,
            details: Object.fromEntries(
              Object.entries(st.poolSource.details ?? {}).map(([k, v]) => [k, String(v)]),
            ),
          },
          attachments: st.attachments,
          reconcile: st.reconcile,
          version: VERSION,
          networks: (st.networks ?? []).map((n) => ({
            ...n,
            pools: n.pools.map(toProtoPool),
            backendDetails: Object.fromEntries(
              Object.entries(n.backendDetails).map(([k, v]) => [k, String(v)]),
            ),
          })),
          dpus: (st.dpus ?? []).map((d) => ({
            ...d,
            lastHeartbeatAgeMs: d.lastHeartbeatAgeMs ?? 0,
            sessionId: d.sessionId ?? '',
            peer: d.peer ?? '',
            reason: d.reason ?? '',
          })),
          fabric: st.fabric && toProtoFabric(st.fabric),
        };
      }),
      // Encoded as the rows are read, into one buffer (see LIST_SERVICE below).
      list: this.unary<ListRequest, ListResponse>('List', async () => encodeList(await s.list())),
      get: this.unary<GetRequest, GetResponse>('Get', async (req) => ({
        attachments: (await s.get(req.workloadId, req.ifName || undefined)).map(toProtoAttachment),
      })),
      check: this.unary<CheckRequest, CheckResponse>('Check', async (req) => {
        const drift = await s.check(req.workloadId, req.ifName);
        return { ok: drift.length === 0, drift };
      }),
      listStream: (call) => void this.streamList(call),
      gc: this.unary<GCRequest, GCResponse>('GC', async (req) => {
        if (req.namespacesGone) {
          const swept = await s.sweep(req.dryRun);
          return {
            removed: swept.released.map(parseAttachmentKey),
            suspected: swept.suspected.map(parseAttachmentKey),
          };
        }
        if (req.dryRun) throw invalidArgument('dry_run is supported with namespaces_gone only');
        const res = await s.gc(
          req.keep.map((k) => ({ workloadId: k.workloadId, ifName: k.ifName || undefined })),
        );
        return { removed: res.removed.map(parseAttachmentKey), suspected: [] };
      }),
    };
  }

  /**
   * ListStream: the attachments a page at a time, each page read only once grpc-js has taken the
   * previous one's messages (write() says false while its buffer is full, 'drain' says it emptied), so
   * that a slow client costs the daemon one page, not the table.
   */
  private async streamList(call: grpc.ServerWritableStream<ListRequest, ProtoAttachment>): Promise<void> {
    let gone = false;
    call.once('cancelled', () => (gone = true));
    try {
      let after: string | undefined;
      for (;;) {
        const page = await this.service.listPage(after, LIST_STREAM_PAGE);
        for (const att of page) {
          if (gone) return;
          if (!call.write(toProtoAttachment(att))) await drained(call);
        }
        const last = page.at(-1);
        if (!last || page.length < LIST_STREAM_PAGE) break;
        after = last.key;
      }
      if (!gone) call.end();
    } catch (err) {
      const e = asWorkloadNetError(err);
      if (!knownWorkloadNetError(err)) this.log.error({ method: 'ListStream', err }, 'unexpected error');
      if (!gone) call.emit('error', { code: e.grpcCode, details: e.message });
    }
  }

  /** Adapts a promise-returning handler to grpc-js, mapping every failure to a proper status code. */
  private unary<Req, Res>(method: string, fn: (req: Req) => Promise<Res>): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      fn(call.request).then(
        (res) => callback(null, res),
        (err: unknown) => {
          const e = asWorkloadNetError(err);
          if (!knownWorkloadNetError(err)) this.log.error({ method, err }, 'unexpected error');
          callback({ code: e.grpcCode, details: e.message });
        },
      );
    };
  }
}

/** Attachments ListStream reads per page (and holds at most, with the messages grpc-js buffers). */
export const LIST_STREAM_PAGE = 256;

/** Until a stream's buffer has emptied, or its call ended without it (a cancelled client never drains). */
function drained(call: grpc.ServerWritableStream<ListRequest, ProtoAttachment>): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      call.off('drain', done);
      call.off('cancelled', done);
      call.off('close', done);
      resolve();
    };
    call.on('drain', done);
    call.on('cancelled', done);
    call.on('close', done);
  });
}

/**
 * A List of thousands of attachments built as objects first (every row decoded, turned into a protobuf
 * object, then encoded) held all of them at once and left tens of MiB of garbage per call; the daemon's
 * memory peaked after a few Lists. So each attachment is encoded as its row is read, into one writer,
 * and the encoded bytes are what the handler returns: the List method's serializer passes them
 * through. Clients see the same ListResponse on the wire.
 */
const LIST_SERVICE = {
  ...WorkloadNetworkingService,
  list: {
    ...WorkloadNetworkingService.list,
    responseSerialize: (value: ListResponse | EncodedList): Buffer =>
      value instanceof Uint8Array
        ? Buffer.from(value.buffer, value.byteOffset, value.byteLength)
        : Buffer.from(ListResponse.encode(value).finish()),
  },
} as const;

/** ListResponse bytes; typed as a ListResponse for the handler, which grpc-js passes on untouched. */
type EncodedList = Uint8Array & ListResponse;

function encodeList(atts: Iterable<Attachment>): EncodedList {
  const w = new BinaryWriter();
  // ListResponse.attachments is field 1, length-delimited: what ListResponse.encode writes per entry.
  for (const att of atts) ProtoAttachmentCodec.encode(toProtoAttachment(att), w.uint32(10).fork()).join();
  return w.finish() as EncodedList;
}

/** The same service definition under another fully-qualified name (paths are "/<service>/<method>"). */
function renamed<T extends grpc.ServiceDefinition>(def: T, serviceName: string): T {
  const out: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const [k, m] of Object.entries(def)) {
    out[k] = {
      ...(m as grpc.MethodDefinition<unknown, unknown>),
      path: m.path.replace(/^\/[^/]+\//, `/${serviceName}/`),
    };
  }
  return out as unknown as T;
}

/**
 * The request's VF settings in the core's terms (the fields share their names), unchecked: the core
 * validates them (a link state it does not know included) with the same rules as the CNI network
 * config's, and keeps only the fields that are set. An empty link state is proto3's "unset".
 */
function fromVfSettings(vf: VfSettings | undefined): DpuPortOptions | undefined {
  return vf && { ...vf, linkState: (vf.linkState || undefined) as DpuPortOptions['linkState'] };
}

export function toAttachResponse(att: Attachment): AttachResponse {
  const dp = att.dataplane;
  return {
    ip: att.ips.map((i) => addressToBytes(i.address)),
    // The workload's interface stays first (ips[].interface is 0, as in the original contract); the
    // host-side one follows, with no sandbox, as CNI results list it.
    interfaces: [
      { name: att.ifName, mac: dp?.mac ?? '', mtu: dp?.mtu ?? att.mtu, sandbox: att.netnsPath },
      ...(dp?.hostIfName ? [{ name: dp.hostIfName, mac: '', mtu: dp.mtu, sandbox: '' }] : []),
    ],
    ips: att.ips.map((i) => ({
      // The routed model programs a host route per address, so the workload holds it as /32 (/128).
      cidr: `${i.address}/${i.family === 4 ? 32 : 128}`,
      gateway: i.gateway,
      interface: 0,
      family: i.family,
    })),
    routes: (dp?.routes ?? []).map((r) => ({ destination: r.destination, gateway: r.gateway ?? '' })),
    dns: att.dns
      ? {
          nameservers: att.dns.nameservers,
          search: att.dns.search,
          options: att.dns.options,
          domain: att.dns.domain ?? '',
        }
      : undefined,
    backend: att.backend,
    backendDetails: Object.fromEntries(Object.entries(dp?.details ?? {}).map(([k, v]) => [k, String(v)])),
    network: att.network ?? DEFAULT_NETWORK,
  };
}

function toProtoPool(p: PoolUsage): PoolStatus {
  return {
    cidr: p.cidr,
    family: p.family,
    size: p.size,
    used: p.used,
    state: p.state ?? 'active',
    source: p.source ?? '',
  };
}

function toProtoFabric(f: FabricStatus): ProtoFabricStatus {
  return {
    mode: f.mode,
    ready: f.ready,
    reasons: f.reasons,
    warnings: f.warnings,
    node: f.node,
    underlay: f.underlay,
    uplink: f.uplink,
    mtu: f.mtu,
    podMtu: f.podMtu,
    vtep: f.vtep,
    source: f.source && {
      kind: f.source.kind,
      ready: f.source.ready,
      connected: f.source.connected,
      reasons: f.source.reasons,
      rejected: f.source.rejected,
    },
    peers: f.peers.map((p) => ({
      ...p,
      withdrawnAt: p.withdrawnAt ?? '',
      endpoints: p.endpoints ?? [],
      seenBy: p.seenBy ?? [],
      probe: p.probe && { ...p.probe, rttMs: p.probe.rttMs ?? 0, medianRttMs: p.probe.medianRttMs ?? 0 },
    })),
    peerCount: f.peerCount,
    routes: f.objects.routes,
    neighbours: f.objects.neighbours,
    fdb: f.objects.fdb,
    repairs: f.repairs,
    lastApply: f.lastApply ?? '',
    endpoints: f.endpoints ?? [],
    borrowed: f.borrowed ?? 0,
    slices: f.slices ?? 0,
    filteredPackets: f.filteredPackets,
    hostPort: f.hostPort,
  };
}

function toProtoAttachment(att: Attachment): ProtoAttachment {
  return {
    workloadId: att.workloadId,
    ifName: att.ifName,
    netnsPath: att.netnsPath,
    containerId: att.containerId ?? '',
    pod: att.pod
      ? { uid: att.pod.uid ?? '', namespace: att.pod.namespace ?? '', name: att.pod.name ?? '' }
      : undefined,
    result: toAttachResponse(att),
    state: att.state,
    createdAt: att.createdAt,
    network: att.network ?? DEFAULT_NETWORK,
  };
}
