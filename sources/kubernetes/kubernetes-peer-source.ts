import {
  CoreV1Api,
  ListWatch,
  PatchStrategy,
  Watch,
  setHeaderOptions,
  type V1Node,
  type V1NodeList,
} from '@kubernetes/client-node';
import { invalidArgument } from '../../core/errors';
import { parseCidr } from '../../lib/cidr';
import type { Logger } from '../../core/logger';
import type { NodeRecord, Peer, PeerSource, PeerSourceStatus } from '../../core/peer-source';
import { AnnotationPublisher } from './annotation-publisher';
import { codeOf, describeApiError } from './api-error';
import { FABRIC_ANNOTATION, encodeAnnotation } from './fabric-annotation';
import { loadKubeConfig } from './kubernetes-pool-source';
import { NodePeerTable } from './node-peer-table';

// The other nodes from the Kubernetes API: every Node's spec.podCIDRs and InternalIP, plus the
// workloadnet.io/fabric annotation each node's daemon writes on its own Node (node-peer-table.ts).
// One list of all Nodes, then a watch from the list's resourceVersion (the client library's
// ListWatch: a dropped watch resumes from the last version seen; 410 Gone relists, and Nodes missing
// from the new list are deleted). The library gives up on other errors (API down); we start it again
// with a capped backoff, from where it was. Losing the API never empties the table: the last list
// stands until a newer one says otherwise.
//
// The annotation is written with a JSON merge patch of nodes/status, as flannel does: the status
// subresource lets the daemon change the metadata of a Node but never its spec (taints,
// unschedulable, podCIDRs), which `patch` on nodes would allow for every Node of the cluster. It is
// written again whenever a watch event shows our Node without it or with another value, and never
// removed: a restart must not withdraw the node.
//
// Watch load at 5,000 nodes: one watch of all Nodes per daemon, 5,000 watches, all served from the
// API server's watch cache (one etcd watch behind them; each event serialized once, the same bytes
// written to every watcher); the list is served from the cache too (resourceVersion=0), so a relist
// storm after an API server restart does not reach etcd. What changes a Node: the kubelet's 10 s
// heartbeat has gone to a Lease (kube-node-lease) since 1.17, which we do not watch; the Node's status
// is written on a condition or address change, else once per nodeStatusReportFrequency (5 min). So
// about 5,000 / 300 s = 17 Node updates/s cluster-wide, and each daemon receives those 17 events/s
// (an event is a few KB to ~15 KB: a Node carries up to 50 image names), ~250 KB/s at worst; the API
// servers together send 5,000 times that (~83,000 events/s). Our own annotation adds one write per
// daemon start. That is the design and the cost of flannel and kube-router, which watch all Nodes on
// every node: modest to a thousand nodes, heavy but workable at 5,000 with a few API servers.
// Alternatives, not built: a small per-node resource holding the record and a copy of the podCIDRs and
// addresses changes only when the node does, so the fan-out falls to almost nothing, at the price of a
// CRD to install and a copy to keep true (Cilium's CiliumNode); a metadata-only watch
// (PartialObjectMetadata) cannot see podCIDRs or addresses; a fan-out proxy (Calico's Typha) moves the
// cost off the API servers.

export interface KubernetesPeerSourceOptions {
  nodeName: string;
  /** kubeconfig file; empty = $KUBECONFIG, else the in-cluster service account. */
  kubeconfig: string;
  logger: Logger;
  /** First and largest delay before a failed list+watch or annotation write is tried again. */
  backoffMs?: { initial: number; max: number };
  /** The cluster's ranges (fabric.clusterCidrs): a podCIDR outside them is not routed; empty: unchecked. */
  clusterCidrs?: readonly string[];
  /** This node's pools besides its Node's podCIDRs (the other networks' podCidrs). */
  ownRanges?: readonly string[];
}

export class KubernetesPeerSource implements PeerSource {
  readonly kind = 'kubernetes';
  private readonly table: NodePeerTable;
  private readonly listeners: Array<() => void> = [];
  private api?: CoreV1Api;
  private informer?: ListWatch<V1Node>;
  private self?: NodeRecord;
  private isSynced = false;
  private connected = false;
  private lastError = '';
  private stopped = false;
  private lists = 0;
  private retry?: NodeJS.Timeout;
  private backoff: number;
  /** The own Node as last seen: undefined before the first list, null when it does not exist. */
  private own?: V1Node | null;
  /** The own Node as last seen to exist: its podCIDRs and addresses are this node's own. */
  private ownSeen?: V1Node;
  private readonly publisher: AnnotationPublisher;

  constructor(private readonly opts: KubernetesPeerSourceOptions) {
    this.table = new NodePeerTable(opts.nodeName, {
      ...(opts.clusterCidrs ? { clusterCidrs: opts.clusterCidrs } : {}),
      ...(opts.ownRanges ? { ownRanges: opts.ownRanges } : {}),
    });
    this.backoff = this.initialBackoff;
    this.publisher = new AnnotationPublisher({
      nodeName: opts.nodeName,
      logger: opts.logger,
      ...(opts.backoffMs ? { backoffMs: opts.backoffMs } : {}),
      ready: () => this.api !== undefined,
      patch: (annotation) =>
        this.api!.patchNodeStatus(
          { name: opts.nodeName, body: { metadata: { annotations: { [FABRIC_ANNOTATION]: annotation } } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      answered: (node) => {
        this.reachable();
        this.own = node;
      },
      failed: (code, err) => {
        if (code === 404) this.own = null;
        else if (code === undefined) this.unreachable(err);
      },
    });
  }

  get synced(): boolean {
    return this.isSynced;
  }

  /** Full lists done so far (the first, and one per 410 Gone). */
  get listCount(): number {
    return this.lists;
  }

  /** Refuses a record of another node before connecting anything. */
  async start(self: NodeRecord): Promise<void> {
    if (self.node !== this.opts.nodeName)
      throw invalidArgument(
        `node record names ${self.node}, but this source serves node ${this.opts.nodeName}`,
      );
    this.self = self;
    this.publisher.annotation = encodeAnnotation(self);
    this.settleSelf();
    const kc = loadKubeConfig(this.opts.kubeconfig);
    const api = kc.makeApiClient(CoreV1Api);
    this.api = api;
    const list = async (): Promise<V1NodeList> => {
      // From the watch cache (resourceVersion 0): a list of 5,000 Nodes never goes to etcd.
      const nodes = await api.listNode({ resourceVersion: '0' });
      this.reachable();
      this.applyList(nodes.items);
      return nodes;
    };
    const informer = new ListWatch<V1Node>('/api/v1/nodes', new Watch(kc), list, false);
    // The library calls add/update for each listed Node after the list: the table has them already
    // (applyList), and the same Node again changes nothing.
    const onNode = (node: V1Node): void => {
      this.reachable();
      this.applyNode(node);
    };
    informer.on('add', onNode);
    informer.on('update', onNode);
    informer.on('delete', (node) => {
      this.reachable();
      const name = node.metadata?.name ?? '';
      if (name === this.opts.nodeName) {
        // Registered again, it comes back without the annotation: written on its ADDED event.
        this.own = null;
        this.publisher.published = false;
      } else if (this.table.remove(name)) this.notify();
    });
    informer.on('error', (err: unknown) => this.restartLater(err));
    this.informer = informer;
    void this.publisher.publish();
    // Not awaited: the daemon serves (the fabric not ready) while the API is unreachable.
    informer.start().catch((err: unknown) => this.restartLater(err));
  }

  /**
   * Patches the annotation again with the changed record (nothing when it is unchanged). A failed
   * write is retried with the backoff, as at start; Status says it is not published meanwhile.
   */
  async update(self: NodeRecord): Promise<void> {
    if (self.node !== this.opts.nodeName)
      throw invalidArgument(
        `node record names ${self.node}, but this source serves node ${this.opts.nodeName}`,
      );
    this.self = self;
    if (this.settleSelf()) this.notify();
    const annotation = encodeAnnotation(self);
    if (annotation === this.publisher.annotation) return;
    this.publisher.annotation = annotation;
    this.publisher.published = false;
    this.publisher.resetBackoff();
    await this.publisher.publish();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    this.publisher.stop();
    // The annotation stays: a restart must not withdraw the node.
    await this.informer?.stop();
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.table.peers();
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  status(): PeerSourceStatus {
    const node = this.opts.nodeName;
    const reasons: string[] = [];
    if (!this.isSynced)
      reasons.push(
        `no full list of Nodes from the Kubernetes API yet${this.lastError ? ` (${this.lastError})` : ''}`,
      );
    else if (!this.connected)
      reasons.push(
        `Kubernetes API unreachable (${this.lastError || 'reconnecting'}); keeping the last known ` +
          `${this.table.peers().size} peers`,
      );
    if (this.self && !this.publisher.published)
      reasons.push(
        this.own === null
          ? `Node ${node} does not exist in the Kubernetes API: its ${FABRIC_ANNOTATION} annotation cannot be published`
          : `${FABRIC_ANNOTATION} annotation of Node ${node} not published yet` +
              (this.publisher.error ? ` (${this.publisher.error}); retrying` : ''),
      );
    const mismatch = this.underlayMismatch();
    if (mismatch) reasons.push(mismatch);
    reasons.push(...this.table.reasons());
    return {
      kind: this.kind,
      ready: this.isSynced,
      connected: this.connected,
      reasons,
      rejected: this.table.rejected(),
    };
  }

  private get initialBackoff(): number {
    return this.opts.backoffMs?.initial ?? 500;
  }

  private applyList(items: readonly V1Node[]): void {
    this.lists++;
    const own = items.find((n) => n.metadata?.name === this.opts.nodeName);
    this.own = own ?? null;
    // This node's ranges first: a peer's podCIDR over them is never routed, not even for a moment.
    if (own) this.ownSeen = own;
    const settled = this.settleSelf();
    const changed = this.table.replace(items) || settled;
    const first = !this.isSynced;
    this.isSynced = true;
    this.opts.logger.info({ nodes: items.length, peers: this.table.peers().size, first }, 'listed Nodes');
    if (own) this.checkOwn(own);
    if (changed || first) this.notify();
  }

  private applyNode(node: V1Node): void {
    if (node.metadata?.name === this.opts.nodeName) {
      this.ownSeen = node;
      if (this.settleSelf()) this.notify();
      return this.checkOwn(node);
    }
    if (this.table.put(node)) this.notify();
  }

  /**
   * Tells the table what this node is: its Node's podCIDRs and InternalIPs (the last seen; a deleted
   * Node keeps them, since its ranges come back with it), its address and its DPUs'. True when
   * peers() changed.
   */
  private settleSelf(): boolean {
    const node = this.ownSeen;
    const own = node?.spec?.podCIDRs ?? (node?.spec?.podCIDR ? [node.spec.podCIDR] : []);
    const ranges = own.filter(isCidr);
    const underlay = [
      ...(this.self?.underlay ?? []),
      ...(node?.status?.addresses ?? []).filter((a) => a.type === 'InternalIP').map((a) => a.address),
    ];
    for (const e of this.self?.endpoints ?? []) {
      ranges.push(...e.prefixes);
      underlay.push(e.underlay);
    }
    return this.table.setSelf(ranges, underlay);
  }

  /** Our Node as the API has it: the annotation removed or changed by someone is written again. */
  private checkOwn(node: V1Node): void {
    const wasMissing = this.own === null;
    this.own = node;
    const have = node.metadata?.annotations?.[FABRIC_ANNOTATION];
    if (have === this.publisher.annotation) {
      this.publisher.published = true;
      return;
    }
    if (this.publisher.published)
      this.opts.logger.warn(
        { node: this.opts.nodeName, annotation: FABRIC_ANNOTATION },
        'own fabric annotation removed or changed on the Node; writing it again',
      );
    this.publisher.published = false;
    if (wasMissing) this.publisher.resetBackoff();
    void this.publisher.publish();
  }

  /** The daemon's underlay address is not one the Node reports: peers route to the Node's. */
  private underlayMismatch(): string | undefined {
    const mine = this.self?.underlay[0];
    const addresses = (this.own?.status?.addresses ?? [])
      .filter((a) => a.type === 'InternalIP')
      .map((a) => a.address);
    if (!mine || addresses.length === 0 || addresses.includes(mine)) return undefined;
    return (
      `this node's underlay address ${mine} is not an InternalIP of Node ${this.opts.nodeName} ` +
      `(${addresses.join(', ')}): other nodes send to the Node's address; set --node-ip to it`
    );
  }

  private notify(): void {
    for (const l of this.listeners) {
      try {
        l();
      } catch (err) {
        this.opts.logger.error({ err: (err as Error).message }, 'peer change listener failed');
      }
    }
  }

  private reachable(): void {
    if (!this.connected) this.opts.logger.info({}, 'Kubernetes API reachable (peers)');
    this.connected = true;
    this.lastError = '';
    this.backoff = this.initialBackoff;
  }

  private unreachable(err: unknown): void {
    if (this.connected)
      this.opts.logger.warn({ err: describeApiError(err) }, 'Kubernetes API unreachable (peers)');
    this.connected = false;
    this.lastError = describeApiError(err);
  }

  /**
   * Resumes the list+watch from the last version seen (no relist). One read of our Node first tells
   * whether the API is back: a resumed watch that brings no event would not say so.
   */
  private async restart(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.api!.readNode({ name: this.opts.nodeName });
    } catch (err) {
      // Any answer from the API server (a 404 included) means it is reachable.
      if (codeOf(err) === undefined) return this.restartLater(err);
    }
    this.reachable();
    this.informer?.start().catch((e: unknown) => this.restartLater(e));
  }

  /** Starts the list+watch again after a failure, after a capped backoff. */
  private restartLater(err: unknown): void {
    if (this.stopped) return;
    this.unreachable(err);
    this.opts.logger.warn(
      { err: this.lastError, retryMs: this.backoff },
      'Kubernetes list+watch of Nodes failed',
    );
    clearTimeout(this.retry);
    this.retry = setTimeout(() => void this.restart(), this.backoff);
    this.retry.unref();
    this.backoff = Math.min(this.backoff * 2, this.opts.backoffMs?.max ?? 30_000);
  }
}

function isCidr(text: string): boolean {
  try {
    parseCidr(text);
    return true;
  } catch {
    return false;
  }
}
