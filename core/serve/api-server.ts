import { parseAttachmentKey } from '../attachment-key';
import * as net from 'node:net';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import type {
  AttachRequest,
  AttachResponse,
  Attachment as ProtoAttachment,
  CheckRequest,
  CheckResponse,
  DetachRequest,
  DetachResponse,
  GCRequest,
  GCResponse,
  GetRequest,
  GetResponse,
  ListRequest,
  ListResponse,
  PolicyRequest,
  PolicyResponse,
  StatusRequest,
  StatusResponse,
  WorkloadNetworkingServer,
} from '../../proto/gen/workloadnet/v1/workload';
import { ConnectionCap } from './connection-cap';
import {
  asWorkloadNetError,
  failedPrecondition,
  invalidArgument,
  knownWorkloadNetError,
  unavailable,
} from '../errors';
import type { Logger } from '../logger';
import { LogRate } from '../../lib/log-rate';
import { listenOnSocket } from './unix-socket';
import type { WorkloadService } from '../workload-service';
import { fromAttachRequest, toAttachResponse, toProtoAttachment, toStatusResponse } from './api-messages';
import { LIST_SERVICE, encodeList } from './list-encoding';

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
        const att = await s.attach(fromAttachRequest(req));
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
        return { ...toStatusResponse(st), version: VERSION };
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
      policy: this.unary<PolicyRequest, PolicyResponse>('Policy', async (req) => {
        if (!s.policy) throw failedPrecondition('NetworkPolicy is off on this node (networkPolicy)');
        return { pods: await s.policy(req.namespace, req.pod) };
      }),
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
