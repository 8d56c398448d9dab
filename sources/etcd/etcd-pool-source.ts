import { Etcd3 } from 'etcd3';
import { knownWorkloadNetError, unavailable, type WorkloadNetError } from '../../core/errors';
import type { IpAllocator } from '../../core/ipam/ip-allocator';
import type { Logger } from '../../core/logger';
import type { Metrics } from '../../core/metrics';
import type { EndpointPools, PoolSource } from '../../core/ipam/pool-source';
import type { PoolSourceStatus } from '../../core/workload-service';
import type { Store } from '../../core/store/store';
import { BlockCache } from './block-cache';
import { BlockClaims } from './block-claims';
import { blockLayout, type BlockLayout } from './block-layout';
import { BlockRegistry } from './block-registry';
import type { BlockOwner } from './block-owner';
import { DpuLiveness, type ConnectedDpus } from './dpu-liveness';
import { etcdClientOptions } from './etcd-client';
import { NodeNameHold } from './node-name-hold';
import { OwnedBlocks } from './owned-blocks';

// Address blocks of cluster CIDRs claimed in etcd (see docs/pool-sources.md). The attach path never
// talks to etcd while the node's blocks have free addresses: blocks are claimed ahead of need, in the
// background, when the free addresses of a family fall below a threshold. Only an attach that finds a
// family full waits for a claim, for a bounded time, and fails UNAVAILABLE at once when etcd is known
// to be unreachable. Owned blocks live in the local store too, so the daemon starts and serves
// without etcd.
//
// With DPUs (EndpointPools, used by the slice book of a network whose ports are placed on DPUs), each
// DPU claims blocks of its own: the block's key names node and DPU (block-owner.ts), the block is a
// pool of that DPU's ports only, claimed ahead and released when empty by the same rules as a node's
// blocks, counted per DPU. The node then claims blocks of its own only when an attach not placed on a
// DPU needs one. Only a connected DPU is claimed blocks ahead; a gone one gives back its empty blocks,
// and the node's DPU identities holding blocks are bounded (dpu-liveness.ts).
//
// This file is the source as the daemon sees it: its connection to etcd, the node name it holds, its
// Status and the maintenance tick. The blocks the node owns are owned-blocks.ts; how it claims more,
// block-claims.ts.

/** Ticks between two reconciliations with etcd while connected (one range read each). */
const SYNC_EVERY_TICKS = 10;
/** Ticks between two questions to the backend about which DPUs are connected. */
const LIVENESS_EVERY_TICKS = 5;

export interface EtcdPoolSourceOptions {
  endpoints: string[];
  clusterCidrs: string[];
  /** IPv4 block prefix length (IPv6 blocks: 96 + it). */
  blockSize: number;
  prefix: string;
  /** PEM files; ca alone = TLS, with cert and key = mutual TLS. */
  tls?: { ca: string; cert?: string; key?: string };
  nodeName: string;
  emptyBlockGraceMs: number;
  store: Store;
  logger: Logger;
  metrics: Metrics;
  /** How long an attach waits for a block claim when its family is full. */
  claimTimeoutMs?: number;
  /** Deadline of one etcd call. */
  callTimeoutMs?: number;
  /** TTL of the node's alive key. */
  aliveTtlSeconds?: number;
  /** Period of the maintenance loop (reconnect, claim ahead, release empty blocks). */
  tickMs?: number;
  /** dpu.goneGraceSeconds in ms: a DPU unseen this long gives back its empty blocks. */
  goneGraceMs?: number;
  /** Which DPU agents are connected now (the backend's word); absent: every listed one counts. */
  connectedDpus?: ConnectedDpus;
}

export class EtcdPoolSource implements PoolSource {
  readonly kind = 'etcd';
  private readonly layouts: BlockLayout[];
  private readonly owned: OwnedBlocks;
  private readonly claims: BlockClaims;
  /** Blocks come per DPU (EndpointPools.use): the node claims none ahead for itself. */
  private perEndpoint = false;
  readonly endpointPools: EndpointPools = {
    use: () => {
      this.perEndpoint = true;
    },
    present: (ids) => {
      this.dpus.listed(ids);
      this.claims.claimAheadIfLow();
    },
    needMoreFor: (family, endpoint) => {
      // A port is being placed on it: it is there.
      this.dpus.seen(endpoint);
      return this.claims.waitForClaim(family, endpoint);
    },
  };
  private readonly dpus: DpuLiveness;
  private client?: Etcd3;
  private registry?: BlockRegistry;
  private cache?: BlockCache;
  private allocator?: IpAllocator;
  /** The node name's alive key: blocks are served and claimed under the name only while it is held. */
  private readonly name: NodeNameHold;
  private timer?: NodeJS.Timeout;
  private connected = false;
  private synced = false;
  private lastError = '';
  private stopped = false;
  private ticking = false;
  private ticks = 0;
  private readonly callTimeoutMs: number;
  private readonly tickMs: number;

  constructor(private readonly opts: EtcdPoolSourceOptions) {
    this.layouts = opts.clusterCidrs.map((c) => blockLayout(c, opts.blockSize));
    this.callTimeoutMs = opts.callTimeoutMs ?? 2000;
    this.tickMs = opts.tickMs ?? 1000;
    this.dpus = new DpuLiveness(opts);
    this.name = new NodeNameHold({
      nodeName: opts.nodeName,
      store: opts.store,
      ttlSeconds: opts.aliveTtlSeconds ?? 10,
      logger: opts.logger,
      reachable: () => this.reachable(),
      failed: (err) => this.failed(err),
    });
    const shared = {
      nodeName: opts.nodeName,
      layouts: this.layouts,
      logger: opts.logger,
      metrics: opts.metrics,
      dpus: this.dpus,
      registry: () => this.registry!,
      cache: () => this.cache!,
      reachable: () => this.reachable(),
      owner: (endpoint: string | undefined) => this.owner(endpoint),
      freeOf: (family: 4 | 6, endpoint: string | undefined) => this.freeOf(family, endpoint),
      lowWater: (layout: BlockLayout) => lowWater(layout),
      holders: () => this.holders(),
    };
    this.owned = new OwnedBlocks({
      ...shared,
      emptyBlockGraceMs: opts.emptyBlockGraceMs,
      allocator: () => this.allocator!,
      rangeMayHaveRoom: (family) => {
        if (family === undefined) this.claims.full.clear();
        else this.claims.full.delete(family);
      },
    });
    this.claims = new BlockClaims({
      ...shared,
      claimTimeoutMs: opts.claimTimeoutMs ?? 3000,
      name: this.name,
      connected: () => this.connected,
      stopped: () => this.stopped,
      lastError: () => this.lastError,
      allocator: () => this.allocator,
      failed: (err) => this.failed(err),
      ownersAhead: () => (this.perEndpoint ? [...this.endpointsServed()] : [undefined]),
      serve: (block, layout, endpoint) => this.owned.serve(block, layout, endpoint),
    });
  }

  families(): ReadonlyArray<4 | 6> {
    return this.layouts.map((l) => l.family);
  }

  async start(allocator: IpAllocator): Promise<void> {
    this.allocator = allocator;
    this.cache = new BlockCache(this.opts.store);
    for (const [block, entry] of this.cache.all()) {
      if (entry.node !== this.opts.nodeName) {
        this.opts.logger.warn(
          { block, owner: entry.node, node: this.opts.nodeName },
          'cached block belongs to another node name; ignored',
        );
        continue;
      }
      const layout = this.owned.layoutOf(block);
      if (!layout) {
        this.opts.logger.warn({ block }, 'cached block is outside the configured cluster CIDRs; ignored');
        continue;
      }
      this.owned.serve(block, layout, entry.endpoint);
      // A restart is no evidence a DPU is gone: each one's grace starts again.
      if (entry.endpoint !== undefined) this.dpus.seen(entry.endpoint);
    }
    allocator.onChange(() => this.claims.claimAheadIfLow());
    this.client = new Etcd3(
      etcdClientOptions({
        endpoints: this.opts.endpoints,
        tls: this.opts.tls,
        callTimeoutMs: this.callTimeoutMs,
      }),
    );
    this.registry = new BlockRegistry(this.client, this.opts.prefix);
    this.timer = setInterval(() => void this.tick(), this.tickMs);
    this.timer.unref();
    void this.tick();
  }

  isReady(): boolean {
    return (
      this.name.refusal === undefined &&
      (this.connected || this.layouts.every((l) => this.owned.ownsBlockOf(l.family)))
    );
  }

  status(): PoolSourceStatus {
    const reasons: string[] = this.name.refusal ? [this.name.refusal] : [];
    const missing = this.layouts.filter((l) => !this.owned.ownsBlockOf(l.family));
    const ready = this.isReady();
    for (const l of missing)
      if (!this.connected)
        reasons.push(
          `node ${this.opts.nodeName} owns no IPv${l.family} block of ${l.cluster.text} and etcd is unreachable${this.lastError ? ` (${this.lastError})` : ''}`,
        );
    if (ready && !this.connected)
      reasons.push(`etcd is unreachable (${this.lastError || 'connecting'}); serving from owned blocks only`);
    for (const f of this.claims.full) reasons.push(`every IPv${f} block of the cluster CIDR is claimed`);
    reasons.push(...this.dpus.refused.values());
    for (const [block, owner] of this.owned.lost)
      reasons.push(
        `block ${block} is now owned by node ${owner} in etcd; draining its addresses in use here`,
      );
    const v4 = [...this.owned.values()].filter((b) => b.family === 4).length;
    return {
      kind: this.kind,
      ready,
      connected: this.connected,
      reasons,
      details: {
        node: this.opts.nodeName,
        endpoints: this.opts.endpoints.join(','),
        blocksOwned: this.owned.size,
        blocksOwnedV4: v4,
        blocksOwnedV6: this.owned.size - v4,
        blocksOwnedForDpus: [...this.owned.values()].filter((b) => b.endpoint !== undefined).length,
        dpusHoldingBlocks: this.holders().size,
      },
    };
  }

  /**
   * An attach found `family` full. Waits for a claim (joining one already running) for at most
   * claimTimeoutMs; fails UNAVAILABLE at once when etcd is known to be unreachable.
   */
  needMore(family: 4 | 6): Promise<void> {
    return this.claims.waitForClaim(family, undefined);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.allocator?.onChange(undefined);
    // A clean stop says "not alive" at once; the blocks stay ours.
    await this.name.release(this.registry);
    this.client?.close();
  }

  private owner(endpoint: string | undefined): BlockOwner {
    return { node: this.opts.nodeName, ...(endpoint !== undefined ? { endpoint } : {}) };
  }

  /** Free addresses that count against a block owner's low water: a DPU's own, or the node's family. */
  private freeOf(family: 4 | 6, endpoint: string | undefined): number {
    return endpoint === undefined
      ? this.allocator!.freeIn(family)
      : this.allocator!.freeFor(family, endpoint);
  }

  /** DPUs listed now or owning a block, connected and within the bound: those claimed blocks ahead. */
  private endpointsServed(): Set<string> {
    const out = new Set(this.dpus.listedIds);
    for (const b of this.owned.values()) if (b.endpoint !== undefined) out.add(b.endpoint);
    const holders = this.holders();
    for (const e of out)
      if (!this.dpus.isConnected(e) || this.dpus.refusal(e, holders) !== undefined) out.delete(e);
    return out;
  }

  /** DPUs holding blocks, or being claimed one now: the node's DPU identities (dpu-liveness.ts). */
  private holders(): Set<string> {
    const owning = [...this.owned.values()].map((b) => b.endpoint ?? '');
    return new Set([...owning.filter((e) => e !== ''), ...this.claims.claiming()]);
  }

  private reachable(): void {
    if (!this.connected) this.opts.logger.info({ endpoints: this.opts.endpoints }, 'etcd reachable');
    this.connected = true;
    this.lastError = '';
  }

  /** Records an etcd failure; returns the error to throw to an attach. */
  private failed(err: unknown): WorkloadNetError {
    const known = knownWorkloadNetError(err);
    if (known) return known;
    const message = err instanceof Error ? err.message : String(err);
    if (this.connected) this.opts.logger.warn({ err: message }, 'etcd unreachable');
    this.connected = false;
    this.synced = false;
    this.lastError = message.split('\n')[0]!.slice(0, 200);
    return unavailable(`etcd is unreachable (${this.lastError}); retry`);
  }

  /** Maintenance: hold the node name, reconnect and reconcile, claim ahead, release empty blocks. */
  private async tick(): Promise<void> {
    if (this.ticking || this.stopped) return;
    this.ticking = true;
    try {
      // Nothing is done under the name, not even adopting its blocks, before this daemon holds it.
      await this.name.keep(this.registry!);
      if (this.name.value === undefined) return;
      // Reconcile at (re)connection, and now and then: an operator may have released blocks meanwhile.
      if (!this.synced || ++this.ticks % SYNC_EVERY_TICKS === 0) {
        await this.owned.sync();
        this.synced = true;
      }
      if (this.synced) {
        if (this.perEndpoint && this.ticks % LIVENESS_EVERY_TICKS === 0) await this.dpus.refresh();
        for (const l of this.layouts) {
          if (!this.perEndpoint && !this.owned.ownsBlockOf(l.family))
            await this.claims.claim(l, 'ahead').catch(() => undefined);
          if (this.perEndpoint)
            for (const e of this.endpointsServed())
              if (!this.owned.ownsBlockFor(l.family, e))
                await this.claims.claim(l, 'ahead', e).catch(() => undefined);
        }
        this.claims.claimAheadIfLow();
        await this.owned.releaseEmpty();
      }
    } catch (err) {
      this.failed(err);
    } finally {
      this.ticking = false;
    }
  }
}

/** Free addresses below which an owner gets another block in the background: a quarter block. */
const lowWater = (layout: BlockLayout): number => Math.max(1, layout.blockAddresses >> 2);
