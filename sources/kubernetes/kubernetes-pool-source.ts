import {
  CoreV1Api,
  KubeConfig,
  ListWatch,
  Watch,
  type V1Node,
  type V1NodeList,
} from '@kubernetes/client-node';
import { parseCidr } from '../../lib/cidr';
import { failedPrecondition } from '../../core/errors';
import type { IpAllocator } from '../../core/ipam/ip-allocator';
import type { Logger } from '../../core/logger';
import type { PoolSource } from '../../core/ipam/pool-source';
import type { PoolSourceStatus } from '../../core/workload-service';

// This node's ranges as kube-controller-manager's node IPAM assigns them: Node NAME's spec.podCIDRs
// (spec.podCIDR on clusters that predate dual-stack), followed with the client library's list+watch
// (ListWatch: a field selector on the one Node, watch resumed from the last resourceVersion, relist
// on 410 Gone). The library gives up on other errors (API down, connection refused); we start it
// again with a capped backoff. A range that appears becomes a pool; one that disappears drains (its
// addresses in use stay held, no new ones are handed out) and goes once its last address is released.
// A range that overlaps another network's pool on this node is never used (core/address-space.ts).

export interface KubernetesPoolSourceOptions {
  nodeName: string;
  /** kubeconfig file; empty = $KUBECONFIG, else the in-cluster service account. */
  kubeconfig: string;
  logger: Logger;
  /** First and largest delay before restarting a failed list+watch. */
  backoffMs?: { initial: number; max: number };
}

export class KubernetesPoolSource implements PoolSource {
  readonly kind = 'kubernetes';
  private allocator?: IpAllocator;
  private informer?: ListWatch<V1Node>;
  private connected = false;
  /** The Node has been read at least once since start. */
  private seen = false;
  private nodeExists = false;
  private ranges: string[] = [];
  private invalid: string[] = [];
  /** Node ranges left unused because another network on this node has pools in them. */
  private refused: string[] = [];
  private lastError = '';
  private retry?: NodeJS.Timeout;
  private api?: CoreV1Api;
  private backoff: number;
  private stopped = false;

  constructor(private readonly opts: KubernetesPoolSourceOptions) {
    this.backoff = opts.backoffMs?.initial ?? 500;
  }

  families(): undefined {
    return undefined;
  }

  async start(allocator: IpAllocator): Promise<void> {
    this.allocator = allocator;
    const kc = loadKubeConfig(this.opts.kubeconfig);
    const api = kc.makeApiClient(CoreV1Api);
    const fieldSelector = `metadata.name=${this.opts.nodeName}`;
    const list = async (): Promise<V1NodeList> => {
      const nodes = await api.listNode({ fieldSelector });
      this.reachable();
      // The list holds no item when the Node does not exist: no add/update callback says so.
      if (!nodes.items.some((n) => n.metadata?.name === this.opts.nodeName)) this.apply(undefined);
      return nodes;
    };
    const informer = new ListWatch<V1Node>(
      '/api/v1/nodes',
      new Watch(kc),
      list,
      false,
      undefined,
      fieldSelector,
    );
    const onNode = (node: V1Node): void => {
      this.reachable();
      if (node.metadata?.name === this.opts.nodeName) this.apply(node);
    };
    informer.on('add', onNode);
    informer.on('update', onNode);
    informer.on('delete', (node) => {
      this.reachable();
      if (node.metadata?.name === this.opts.nodeName) this.apply(undefined);
    });
    informer.on('error', (err: unknown) => this.restartLater(err));
    this.informer = informer;
    this.api = api;
    // Not awaited: the daemon starts and serves (not ready) while the API is unreachable.
    informer.start().catch((err: unknown) => this.restartLater(err));
  }

  /**
   * Not ready while a Node range is refused: serving from the rest would silently give attachments
   * fewer addresses (an IPv6 one without the IPv4 one) than the Node's ranges promise.
   */
  isReady(): boolean {
    return this.ranges.length > 0 && this.refused.length === 0;
  }

  status(): PoolSourceStatus {
    const node = this.opts.nodeName;
    const reasons: string[] = [];
    const ready = this.isReady();
    if (!this.connected)
      reasons.push(`Kubernetes API unreachable${this.lastError ? ` (${this.lastError})` : ''}; retrying`);
    if (!ready) {
      if (!this.seen) reasons.push(`waiting for Node ${node}'s spec.podCIDRs from the Kubernetes API`);
      else if (!this.nodeExists) reasons.push(`Node ${node} does not exist in the Kubernetes API`);
      else
        reasons.push(
          `Node ${node} has no spec.podCIDRs yet (assigned by kube-controller-manager's node IPAM, --allocate-node-cidrs)`,
        );
    }
    for (const bad of this.invalid) reasons.push(`Node ${node}: ignored podCIDRs entry ${bad}`);
    for (const why of this.refused)
      reasons.push(
        `Node ${node}: podCIDRs entry ${why}, so it is not used (an address may belong to one network only); change the Node's range or that network's podCidrs`,
      );
    for (const p of this.allocator?.report() ?? [])
      if (p.state === 'draining')
        reasons.push(
          `range ${p.cidr} was removed from Node ${node}'s podCIDRs: its ${p.used} addresses in use stay, no new ones are handed out`,
        );
    return {
      kind: this.kind,
      ready,
      connected: this.connected,
      reasons,
      details: { node, podCIDRs: this.ranges.join(',') },
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    await this.informer?.stop();
  }

  /** Applies the Node's current ranges (none when it is gone): new ones serve, missing ones drain. */
  private apply(node: V1Node | undefined): void {
    this.seen = true;
    this.nodeExists = node !== undefined;
    const entries = node?.spec?.podCIDRs ?? (node?.spec?.podCIDR ? [node.spec.podCIDR] : []);
    const valid: string[] = [];
    const invalid: string[] = [];
    const refused: string[] = [];
    for (const entry of entries) {
      let text;
      try {
        text = parseCidr(entry).text;
      } catch (err) {
        invalid.push(`"${entry}" (${(err as Error).message})`);
        continue;
      }
      const other = this.allocator!.conflictElsewhere(text);
      if (other) refused.push(`${text} overlaps ${other}`);
      else valid.push(text);
    }
    if (refused.join() !== this.refused.join())
      for (const why of refused)
        this.opts.logger.warn(
          { node: this.opts.nodeName, range: why },
          "Node range overlaps another network's pool; not used",
        );
    this.refused = refused;
    const pools = valid.map((cidr) => ({ cidr }));
    try {
      this.allocator!.setPools(pools);
    } catch (err) {
      // Entries overlapping each other or a range still draining: keep what is there and say why.
      invalid.push(`${valid.join(', ')} (${(err as Error).message})`);
      return;
    } finally {
      this.invalid = invalid;
    }
    if (valid.join(',') !== this.ranges.join(','))
      this.opts.logger.info({ node: this.opts.nodeName, podCIDRs: valid }, 'Node ranges changed');
    this.ranges = valid;
  }

  private reachable(): void {
    this.connected = true;
    this.lastError = '';
    this.backoff = this.opts.backoffMs?.initial ?? 500;
  }

  /**
   * Resumes the list+watch after a failure. One Node read first tells whether the API is back: a
   * resumed watch that brings no event would not say so, and Status would go on claiming it is down.
   */
  private async restart(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.api!.readNode({ name: this.opts.nodeName });
      this.reachable();
    } catch (err) {
      // Any answer from the API server (a 404 included) means it is reachable; the watch says the rest.
      if (typeof (err as { code?: unknown }).code !== 'number') return this.restartLater(err);
      this.reachable();
    }
    this.informer?.start().catch((e: unknown) => this.restartLater(e));
  }

  private restartLater(err: unknown): void {
    if (this.stopped) return;
    this.connected = false;
    this.lastError = describeApiError(err);
    this.opts.logger.warn({ err: this.lastError, retryMs: this.backoff }, 'Kubernetes list+watch failed');
    clearTimeout(this.retry);
    this.retry = setTimeout(() => void this.restart(), this.backoff);
    this.retry.unref();
    this.backoff = Math.min(this.backoff * 2, this.opts.backoffMs?.max ?? 30_000);
  }
}

/** The kubeconfig file, else $KUBECONFIG, else the in-cluster service account. */
export function loadKubeConfig(file: string): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (file) kc.loadFromFile(file);
    else if (process.env.KUBECONFIG) kc.loadFromDefault();
    else if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
    else
      throw new Error(
        'no credentials: pass --kubeconfig FILE, set $KUBECONFIG, or run the daemon in a pod with a service account',
      );
  } catch (err) {
    // Said of the credentials, not of a source: the pool, peer and policy sources all load them here.
    throw failedPrecondition(`Kubernetes API credentials: ${(err as Error).message}`);
  }
  return kc;
}

export function describeApiError(err: unknown): string {
  if (err instanceof Error) {
    const code =
      (err as { code?: number | string; statusCode?: number }).statusCode ?? (err as { code?: unknown }).code;
    return `${code !== undefined ? `${String(code)}: ` : ''}${err.message}`.split('\n')[0]!.slice(0, 200);
  }
  return String(err).slice(0, 200);
}
