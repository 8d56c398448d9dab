import { attachmentKey } from '../../core/attachment-key';
import { silentLogger, type Logger } from '../../core/logger';
import { WorkloadNetError } from '../../core/errors';
import type { AttachCall, DetachCall, WorkloadService } from '../../core/workload-service';
import {
  CniError,
  CniErrorCode,
  type CniVerbContext,
  cniErrorFromService,
  formatCniError,
} from './cni-error';
import { checkNetnsPath, netnsEnvironmentError } from './cni-netns';
import {
  type AttachmentRequest,
  type CniEnv,
  type CniRequest,
  type DelRequest,
  type GcRequest,
  parseCniRequest,
} from './cni-request';
import type { NetworkConfig } from './cni-config';
import { formatCniResult, mergeWithPrevResult, resultFromAttachment } from './cni-result';
import { LATEST_CNI_VERSION, SUPPORTED_CNI_VERSIONS, isSupportedCniVersion } from './cni-version';

// The CNI verbs, each a short translation to WorkloadService calls. A CNI attachment is keyed by
// (CNI_CONTAINERID, CNI_IFNAME), as GC names them: the container (sandbox) id is the workload id, and
// the pod's identity from CNI_ARGS is kept as metadata only, so a re-created sandbox of the same pod is
// a new workload rather than a conflict.

/** What the plugin executable must print on stdout, and its exit status. */
export interface CniReply {
  exitCode: number;
  stdout: string;
}

export interface CniHandlerOptions {
  /** MTU for attachments whose config sets none; undefined leaves it to the service's default. */
  defaultMtu?: number;
  /**
   * The network config's `name` selects the daemon's network (a node with named networks). Off, every
   * config means the one `default` network, whatever its name, as before networks existed.
   */
  networkFromName?: boolean;
  logger?: Logger;
}

export class CniHandler {
  private readonly logger: Logger;

  constructor(
    private readonly service: WorkloadService,
    private readonly opts: CniHandlerOptions = {},
  ) {
    this.logger = opts.logger ?? silentLogger();
  }

  /** Serve one call. Never throws: every failure becomes CNI error JSON and exit status 1. */
  async handle(env: CniEnv, stdin: string): Promise<CniReply> {
    const started = performance.now();
    let request: CniRequest | undefined;
    let reply: CniReply;
    let failure: CniError | undefined;
    try {
      request = parseCniRequest(env, stdin);
      reply = { exitCode: 0, stdout: await this.dispatch(request) };
    } catch (err) {
      failure = err instanceof CniError ? err : cniErrorFromService(err, verbContext(env.CNI_COMMAND));
      reply = { exitCode: 1, stdout: formatCniError(failure, errorVersion(request, stdin)) };
      if (!(err instanceof CniError) && failure.code === CniErrorCode.INTERNAL) {
        this.logger.error({ err }, 'CNI call failed unexpectedly');
      }
    }
    const fields = {
      command: env.CNI_COMMAND,
      containerId: env.CNI_CONTAINERID,
      ifName: env.CNI_IFNAME,
      exitCode: reply.exitCode,
      ms: Math.round((performance.now() - started) * 100) / 100,
      ...(failure ? { cniCode: failure.code, msg: failure.message } : {}),
    };
    if (failure) this.logger.warn(fields, 'CNI call refused');
    else this.logger.info(fields, 'CNI call served');
    return reply;
  }

  private async dispatch(req: CniRequest): Promise<string> {
    switch (req.command) {
      case 'VERSION':
        return JSON.stringify({ cniVersion: LATEST_CNI_VERSION, supportedVersions: SUPPORTED_CNI_VERSIONS });
      case 'ADD':
        return this.add(req);
      case 'DEL':
        await this.del(req);
        return '';
      case 'CHECK':
        await this.check(req);
        return '';
      case 'STATUS':
        await this.status(req.config);
        return '';
      case 'GC':
        await this.gc(req);
        return '';
    }
  }

  private async add(req: AttachmentRequest): Promise<string> {
    const rc = req.config.runtimeConfig;
    // The daemon programs addresses and routes only. Port mappings and shaping belong to the portmap and
    // bandwidth plugins chained after this one (install-cni --chain declares the capabilities on them);
    // they only reach us when a hand-written config declares them on workloadnet: say so, never drop
    // them silently.
    if (rc.portMappings.length > 0 || rc.bandwidth) {
      this.logger.warn(
        {
          containerId: req.containerId,
          portMappings: rc.portMappings.length,
          bandwidth: Boolean(rc.bandwidth),
        },
        'runtimeConfig portMappings/bandwidth reached workloadnet, which does not apply them; chain the portmap/bandwidth plugins (workloadnet install-cni --chain portmap,bandwidth) and declare those capabilities on them',
      );
    }
    const dns = rc.dns ?? req.config.dns;
    const call: AttachCall = {
      workloadId: req.containerId,
      netnsPath: req.netns,
      ifName: req.ifName,
      origin: 'cni',
    };
    if (this.opts.networkFromName) call.network = req.config.name;
    const pod = { uid: req.args.podUid, namespace: req.args.podNamespace, name: req.args.podName };
    if (pod.uid || pod.namespace || pod.name) {
      call.pod = Object.fromEntries(Object.entries(pod).filter(([, v]) => v !== undefined));
    }
    const mtu = req.config.mtu ?? this.opts.defaultMtu;
    if (mtu !== undefined) call.mtu = mtu;
    if (dns) call.dns = dns;
    // The pod's own choice (CNI_ARGS) is more specific than its network's.
    const dpu = req.args.dpu ?? req.config.dpu;
    if (dpu) call.dpu = dpu;
    if (req.config.dpuPort) call.dpuPort = req.config.dpuPort;

    const attachment = await this.service.attach(call).catch((err: unknown) => {
      throw netnsEnvironmentError(err);
    });
    // A chained position is unusual for a plugin that creates interfaces, but the spec asks every plugin
    // to carry prevResult forward: earlier plugins' entries stay first, ours follow.
    const result = mergeWithPrevResult(req.config.prevResult, resultFromAttachment(attachment, dns));
    return JSON.stringify(formatCniResult(result, req.config.cniVersion));
  }

  private async del(req: DelRequest): Promise<void> {
    // An empty CNI_NETNS (containerd's RemovePodSandbox) or one that vanished is the service's case to
    // tolerate: it releases by key whatever the namespace's state.
    const call: DetachCall = { workloadId: req.containerId, ifName: req.ifName };
    if (req.netns !== undefined) call.netnsPath = req.netns;
    try {
      await this.service.detach(call);
    } catch (err) {
      // "Already gone" is success for DEL (runtimes repeat it); anything else is worth a retry.
      if (err instanceof WorkloadNetError && err.code === 'NOT_FOUND') return;
      throw err;
    }
  }

  private async check(req: AttachmentRequest): Promise<void> {
    await checkNetnsPath(req.netns);
    const key = attachmentKey(req.containerId, req.ifName);
    const drift = await this.service.check(req.containerId, req.ifName);
    if (drift.length > 0) {
      throw new CniError(
        CniErrorCode.ATTACHMENT_DRIFT,
        `attachment ${key} drifted: ${drift.map((d) => `${d.kind}: ${d.message}`).join('; ')}`,
        'DEL and ADD the container again to re-create it',
      );
    }
    // The spec asks CHECK to consult prevResult: what we hold must be what the runtime believes it got.
    const [att] = await this.service.get(req.containerId, req.ifName);
    if (!att) throw new CniError(CniErrorCode.UNKNOWN_CONTAINER, `no attachment ${key}`);
    const problems: string[] = [];
    if (att.netnsPath !== req.netns) {
      problems.push(`attached in netns ${att.netnsPath}, CHECK names ${req.netns}`);
    }
    const prev = req.config.prevResult;
    if (prev) {
      if (!prev.interfaces.some((i) => i.name === req.ifName && (!i.sandbox || i.sandbox === req.netns))) {
        problems.push(`prevResult lists no interface ${req.ifName} in ${req.netns}`);
      }
      const listed = new Set(prev.ips.map((ip) => ip.address.split('/')[0]));
      for (const ip of att.ips) {
        if (!listed.has(ip.address)) problems.push(`prevResult lacks address ${ip.address}`);
      }
    }
    if (problems.length > 0) {
      throw new CniError(
        CniErrorCode.ATTACHMENT_DRIFT,
        `attachment ${key} does not match: ${problems.join('; ')}`,
      );
    }
  }

  private async status(config: NetworkConfig): Promise<void> {
    let status;
    try {
      status = await this.service.status({ fabricPeers: false });
    } catch (err) {
      throw cniErrorFromService(err, 'STATUS');
    }
    // With named networks, a runtime asks about the network its config selects: a DPU network whose
    // agent is away does not stop pods on the host network.
    const network = this.opts.networkFromName
      ? status.networks?.find((n) => n.name === config.name)
      : undefined;
    if (this.opts.networkFromName && !network)
      throw new CniError(
        CniErrorCode.INVALID_NETWORK_CONFIG,
        `unknown network "${config.name}"; this node serves ${(status.networks ?? []).map((n) => `"${n.name}"`).join(', ')}`,
      );
    const ready = network ? network.ready : status.ready;
    if (!ready) {
      const all = network ? network.reasons : status.reasons;
      const reasons = all.length > 0 ? all.join('; ') : 'no reason given';
      throw new CniError(
        CniErrorCode.PLUGIN_NOT_AVAILABLE,
        `workloadnet is not ready: ${reasons}`,
        `backend ${network?.backend ?? status.backend}`,
      );
    }
  }

  private async gc(req: GcRequest): Promise<void> {
    const keep = req.validAttachments.map((a) => ({ workloadId: a.containerId, ifName: a.ifName }));
    // Scoped to CNI-made attachments: the runtime only knows its own, not those attached over gRPC;
    // and to this config's network: it lists only that network's attachments (Multus calls each).
    const network = this.opts.networkFromName ? req.config.name : undefined;
    const { removed } = await this.service.gc(keep, 'cni', network);
    if (removed.length > 0)
      this.logger.info({ removed }, 'CNI GC detached attachments the runtime no longer has');
  }
}

function verbContext(command: string | undefined): CniVerbContext {
  return command === 'DEL' || command === 'CHECK' || command === 'STATUS' || command === 'GC'
    ? command
    : 'ADD';
}

/** The version to label an error with: the config's when we speak it, else our latest. */
function errorVersion(request: CniRequest | undefined, stdin: string): string {
  if (request && 'config' in request) return request.config.cniVersion;
  try {
    const raw: unknown = JSON.parse(stdin);
    if (typeof raw === 'object' && raw !== null && 'cniVersion' in raw) {
      const v = (raw as { cniVersion: unknown }).cniVersion;
      if (typeof v === 'string' && isSupportedCniVersion(v)) return v;
    }
  } catch {
    // Undecodable stdin is already the error being reported; label it with our latest version.
  }
  return LATEST_CNI_VERSION;
}
