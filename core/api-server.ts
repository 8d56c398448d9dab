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
  type GCRequest,
  type GCResponse,
  type GetRequest,
  type GetResponse,
  type ListRequest,
  type StatusRequest,
  type StatusResponse,
  type WorkloadNetworkingServer,
} from '../proto/gen/workloadnet/v1/workload';
import { addressToBytes } from './cidr';
import { asWorkloadNetError, unavailable, WorkloadNetError } from './errors';
import type { Logger } from './logger';
import { secureSocket } from './unix-socket';
import type { Attachment, WorkloadService } from './workload-service';

/** The original contract's service name, served too so that its clients connect unchanged. */
export const SEED_SERVICE = 'metropolis.node.core.network.workloads.WorkloadNetworking';
const OWN_SERVICE = 'workloadnet.v1.WorkloadNetworking';

/** Largest request we accept; the API's messages are small, so anything bigger is hostile or broken. */
export const MAX_MESSAGE_BYTES = 1024 * 1024;

export const VERSION = '0.1.0';

const PROTO_DIR = path.resolve(__dirname, '..', '..', 'proto');

export class ApiServer {
  private readonly server = new grpc.Server({
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': 64 * MAX_MESSAGE_BYTES,
    // Without a bound, a client's burst of a thousand calls is admitted in one event-loop turn and
    // Status waits behind all of them. 32 streams per connection match the attaches the core runs at
    // once; at 100, a burst of 200 Linux attaches on one connection delayed Status by up to 100 ms,
    // at 32 by under 35 ms (test/reliability/load.test.ts).
    'grpc.max_concurrent_streams': 32,
  });
  private readonly health = new HealthImplementation({
    '': 'NOT_SERVING',
    [OWN_SERVICE]: 'NOT_SERVING',
    [SEED_SERVICE]: 'NOT_SERVING',
  });

  constructor(
    private readonly service: WorkloadService,
    private readonly log: Logger,
  ) {
    const handlers = this.handlers(false);
    this.server.addService(LIST_SERVICE, handlers);
    this.server.addService(renamed(LIST_SERVICE, SEED_SERVICE), this.handlers(true));
    this.health.addToServer(this.server);
    const pkg = protoLoader.loadSync(['workloadnet/v1/workload.proto'], { includeDirs: [PROTO_DIR] });
    new ReflectionService(pkg).addToServer(this.server);
  }

  /** Binds the socket; the caller has cleared a stale one with prepareSocketPath (core/unix-socket.ts). */
  async listen(socketPath: string, group: string): Promise<void> {
    await new Promise<void>((resolve, reject) =>
      this.server.bindAsync(`unix:${socketPath}`, grpc.ServerCredentials.createInsecure(), (err) =>
        err ? reject(err) : resolve(),
      ),
    );
    secureSocket(socketPath, group);
  }

  /** Tells health clients whether Attach can succeed now. */
  setServing(serving: boolean): void {
    const s = serving ? 'SERVING' : 'NOT_SERVING';
    for (const name of ['', OWN_SERVICE, SEED_SERVICE]) this.health.setStatus(name, s);
  }

  /** Stops accepting calls and waits up to `graceMs` for running ones before cutting them off. */
  async close(graceMs = 5000): Promise<void> {
    this.setServing(false);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
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
          pod: req.pod,
          dns: req.dns
            ? {
                nameservers: req.dns.nameservers,
                search: req.dns.search,
                options: req.dns.options,
                domain: req.dns.domain || undefined,
              }
            : undefined,
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
      status: this.unary<StatusRequest, StatusResponse>('Status', async () => {
        const st = await s.status();
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
          pools: st.pools.map((p) => ({
            cidr: p.cidr,
            family: p.family,
            size: p.size,
            used: p.used,
            state: p.state ?? 'active',
            source: p.source ?? '',
          })),
          poolSource: st.poolSource && {
            ...st.poolSource,
            details: Object.fromEntries(
              Object.entries(st.poolSource.details ?? {}).map(([k, v]) => [k, String(v)]),
            ),
          },
          attachments: st.attachments,
          reconcile: st.reconcile,
          version: VERSION,
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
      gc: this.unary<GCRequest, GCResponse>('GC', async (req) => {
        const res = await s.gc(
          req.keep.map((k) => ({ workloadId: k.workloadId, ifName: k.ifName || undefined })),
        );
        return {
          removed: res.removed.map((key) => {
            const [workloadId = '', ifName = ''] = key.split('/');
            return { workloadId, ifName };
          }),
        };
      }),
    };
  }

  /** Adapts a promise-returning handler to grpc-js, mapping every failure to a proper status code. */
  private unary<Req, Res>(method: string, fn: (req: Req) => Promise<Res>): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      fn(call.request).then(
        (res) => callback(null, res),
        (err: unknown) => {
          const e = asWorkloadNetError(err);
          if (!(err instanceof WorkloadNetError)) this.log.error({ method, err }, 'unexpected error');
          callback({ code: e.grpcCode, details: e.message });
        },
      );
    };
  }
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

export function toAttachResponse(att: Attachment): AttachResponse {
  const dp = att.dataplane;
  return {
    ip: att.ips.map((i) => addressToBytes(i.address)),
    interfaces: [{ name: att.ifName, mac: dp?.mac ?? '', mtu: dp?.mtu ?? att.mtu, sandbox: att.netnsPath }],
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
  };
}
