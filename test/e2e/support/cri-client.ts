import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { supportFile } from './support-files';

// A typed client for the CRI RuntimeService calls the end-to-end tests make, i.e. what a kubelet does to
// give a pod its network. The proto is loaded at run time: this is test code, so no generation step.

export interface RuntimeVersion {
  version: string;
  runtimeName: string;
  runtimeVersion: string;
  runtimeApiVersion: string;
}

export interface PortMappingSpec {
  protocol?: 'TCP' | 'UDP' | 'SCTP';
  containerPort: number;
  hostPort: number;
  hostIp?: string;
}

export interface DnsSpec {
  servers: string[];
  searches?: string[];
  options?: string[];
}

export interface PodSandboxSpec {
  name: string;
  uid: string;
  namespace: string;
  attempt?: number;
  hostname?: string;
  dns?: DnsSpec;
  portMappings?: PortMappingSpec[];
  /** Cgroup the sandbox is placed under (see ContainerdHarness.cgroupParent). */
  cgroupParent: string;
  logDirectory?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export type PodSandboxState = 'SANDBOX_READY' | 'SANDBOX_NOTREADY';

export interface PodSandboxInfo {
  id: string;
  state: PodSandboxState;
  /** Primary IP reported by the CNI result ('' when the sandbox has none, e.g. after stop). */
  ip: string;
  additionalIps: string[];
  /**
   * The sandbox's network namespace, e.g. /var/run/netns/cni-…, from the runtime spec. The path stays in
   * the spec after StopPodSandbox, but the file itself is gone then.
   */
  netnsPath: string;
}

export interface PodSandboxSummary {
  id: string;
  name: string;
  namespace: string;
  uid: string;
  state: PodSandboxState;
}

export interface RuntimeCondition {
  type: string;
  status: boolean;
  reason: string;
  message: string;
}

/** Wire shapes as @grpc/proto-loader produces them with the options below (camelCase, string enums). */
interface WireMetadata {
  name: string;
  uid: string;
  namespace: string;
  attempt: number;
}
interface WirePodSandboxStatusResponse {
  status?: {
    id: string;
    state: PodSandboxState;
    network?: { ip: string; additionalIps: { ip: string }[] };
  };
  info: Record<string, string>;
}
interface WireListPodSandboxResponse {
  items: { id: string; state: PodSandboxState; metadata?: WireMetadata }[];
}
interface WireStatusResponse {
  status?: { conditions: RuntimeCondition[] };
}

const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  arrays: true,
  objects: true,
};

let service: protoLoader.ServiceDefinition | undefined;

function runtimeService(): protoLoader.ServiceDefinition {
  if (!service) {
    const definition = protoLoader.loadSync(supportFile('cri.proto'), LOADER_OPTIONS);
    const found = definition['runtime.v1.RuntimeService'];
    if (!found || !('Version' in found))
      throw new Error('cri.proto does not define runtime.v1.RuntimeService');
    service = found as protoLoader.ServiceDefinition;
  }
  return service;
}

/** A failed CRI call: the gRPC code plus containerd's message (which quotes the CNI plugin's error). */
export class CriError extends Error {
  constructor(
    readonly method: string,
    readonly code: grpc.status,
    readonly details: string,
  ) {
    super(`CRI ${method} failed (${grpc.status[code] ?? code}): ${details}`);
    this.name = 'CriError';
  }
}

export interface CallOptions {
  /** Per-call deadline (default 60 s: RunPodSandbox on a loaded 2-core machine can take seconds). */
  timeoutMs?: number;
}

export class CriClient {
  private readonly client: grpc.Client;

  private constructor(readonly socketPath: string) {
    this.client = new grpc.Client(`unix://${socketPath}`, grpc.credentials.createInsecure());
  }

  static connect(socketPath: string): CriClient {
    return new CriClient(socketPath);
  }

  close(): void {
    this.client.close();
  }

  async version(opts?: CallOptions): Promise<RuntimeVersion> {
    return this.call<RuntimeVersion>('Version', { version: 'v1' }, opts);
  }

  /** Creates and starts a pod sandbox (network included) and returns its id. */
  async runPodSandbox(spec: PodSandboxSpec, opts?: CallOptions): Promise<string> {
    const res = await this.call<{ podSandboxId: string }>(
      'RunPodSandbox',
      { config: toWireConfig(spec) },
      opts,
    );
    return res.podSandboxId;
  }

  async stopPodSandbox(id: string, opts?: CallOptions): Promise<void> {
    await this.call('StopPodSandbox', { podSandboxId: id }, opts);
  }

  async removePodSandbox(id: string, opts?: CallOptions): Promise<void> {
    await this.call('RemovePodSandbox', { podSandboxId: id }, opts);
  }

  async podSandboxStatus(id: string, opts?: CallOptions): Promise<PodSandboxInfo> {
    const res = await this.call<WirePodSandboxStatusResponse>(
      'PodSandboxStatus',
      { podSandboxId: id, verbose: true },
      opts,
    );
    const status = res.status;
    if (!status) throw new Error(`PodSandboxStatus(${id}) returned no status`);
    return {
      id: status.id,
      state: status.state,
      ip: status.network?.ip ?? '',
      additionalIps: (status.network?.additionalIps ?? []).map((a) => a.ip),
      netnsPath: netnsPathFromVerboseInfo(res.info['info']),
    };
  }

  async listPodSandboxes(opts?: CallOptions): Promise<PodSandboxSummary[]> {
    const res = await this.call<WireListPodSandboxResponse>('ListPodSandbox', {}, opts);
    return res.items.map((item) => ({
      id: item.id,
      state: item.state,
      name: item.metadata?.name ?? '',
      namespace: item.metadata?.namespace ?? '',
      uid: item.metadata?.uid ?? '',
    }));
  }

  /** The runtime's conditions; containerd reports NetworkReady=false while it has no valid CNI config. */
  async status(opts?: CallOptions): Promise<{ conditions: RuntimeCondition[] }> {
    const res = await this.call<WireStatusResponse>('Status', { verbose: false }, opts);
    return { conditions: res.status?.conditions ?? [] };
  }

  private call<Res>(method: string, request: object, opts: CallOptions = {}): Promise<Res> {
    const def = runtimeService()[method];
    if (!def) throw new Error(`cri.proto has no RuntimeService.${method}`);
    const deadline = new Date(Date.now() + (opts.timeoutMs ?? 60_000));
    return new Promise<Res>((resolve, reject) => {
      this.client.makeUnaryRequest(
        def.path,
        def.requestSerialize,
        def.responseDeserialize,
        request,
        new grpc.Metadata(),
        { deadline },
        (err: grpc.ServiceError | null, value?: unknown) => {
          if (err) reject(new CriError(method, err.code, err.details || err.message));
          else resolve(value as Res);
        },
      );
    });
  }
}

function toWireConfig(spec: PodSandboxSpec): object {
  return {
    metadata: { name: spec.name, uid: spec.uid, namespace: spec.namespace, attempt: spec.attempt ?? 0 },
    hostname: spec.hostname ?? spec.name,
    logDirectory: spec.logDirectory ?? '',
    dnsConfig: spec.dns
      ? { servers: spec.dns.servers, searches: spec.dns.searches ?? [], options: spec.dns.options ?? [] }
      : undefined,
    portMappings: (spec.portMappings ?? []).map((p) => ({
      protocol: p.protocol ?? 'TCP',
      containerPort: p.containerPort,
      hostPort: p.hostPort,
      hostIp: p.hostIp ?? '',
    })),
    labels: spec.labels ?? {},
    annotations: spec.annotations ?? {},
    linux: {
      cgroupParent: spec.cgroupParent,
      // A pod network namespace (POD mode) is the point of these tests; the runtime default seccomp
      // profile is what a kubelet asks for.
      securityContext: {
        namespaceOptions: { network: 'POD', pid: 'POD', ipc: 'POD' },
        seccomp: { profileType: 'RuntimeDefault' },
      },
    },
  };
}

/**
 * containerd's verbose PodSandboxStatus carries a JSON document whose runtime spec lists the sandbox's
 * namespaces; the network one's path is the bind-mounted netns file the CNI plugins were given.
 */
export function netnsPathFromVerboseInfo(info: string | undefined): string {
  if (!info) return '';
  const doc: unknown = JSON.parse(info);
  const namespaces = field(field(field(doc, 'runtimeSpec'), 'linux'), 'namespaces');
  if (!Array.isArray(namespaces)) return '';
  for (const ns of namespaces as unknown[]) {
    if (field(ns, 'type') === 'network') {
      const p = field(ns, 'path');
      return typeof p === 'string' ? p : '';
    }
  }
  return '';
}

function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}
