import { Etcd3 } from 'etcd3';
import { knownWorkloadNetError, unavailable, WorkloadNetError } from '../../core/errors';
import type { IpAllocator } from '../../core/ipam/ip-allocator';
import type { Logger } from '../../core/logger';
import type { Metrics } from '../../core/metrics';
import type { EndpointPools, PoolSource } from '../../core/ipam/pool-source';
import type { PoolSourceStatus } from '../../core/workload-service';
import type { Store } from '../../core/store/store';
import { BlockCache } from './block-cache';
import { claimBlock } from './block-claimer';
import { blockIndex, blockLayout, reservedInBlock, type BlockLayout } from './block-layout';
import { BlockRegistry } from './block-registry';
import type { BlockOwner } from './block-owner';
import { DpuLiveness, type ConnectedDpus } from './dpu-liveness';
import { etcdClientOptions } from './etcd-client';
import { NodeNameHold } from './node-name-hold';

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

interface OwnedBlock {
  family: 4 | 6;
  /** The DPU it was claimed for; absent: the node's own. */
  endpoint?: string;
  /** When it was first seen empty (ms), for the release grace period. */
  emptySince?: number;
}

export class EtcdPoolSource implements PoolSource {
  readonly kind = 'etcd';
  private readonly layouts: BlockLayout[];
  private readonly owned = new Map<string, OwnedBlock>();
  /** Claims running, by family and owner (claimKey). */
  private readonly claims = new Map<string, Promise<void>>();
  /** Blocks come per DPU (EndpointPools.use): the node claims none ahead for itself. */
  private perEndpoint = false;
  readonly endpointPools: EndpointPools = {
    use: () => {
      this.perEndpoint = true;
    },
    present: (ids) => {
      this.dpus.listed(ids);
      this.claimAheadIfLow();
    },
    needMoreFor: (family, endpoint) => {
      // A port is being placed on it: it is there.
      this.dpus.seen(endpoint);
      return this.waitForClaim(family, endpoint);
    },
  };
  private readonly dpus: DpuLiveness;
  /** Blocks cached as ours that etcd gives to another node: kept draining, shown in Status. */
  private readonly lost = new Map<string, string>();
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
  private full = new Set<4 | 6>();
  private stopped = false;
  private ticking = false;
  private ticks = 0;
  private readonly claimTimeoutMs: number;
  private readonly callTimeoutMs: number;
  private readonly tickMs: number;

  constructor(private readonly opts: EtcdPoolSourceOptions) {
    this.layouts = opts.clusterCidrs.map((c) => blockLayout(c, opts.blockSize));
    this.claimTimeoutMs = opts.claimTimeoutMs ?? 3000;
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
  }

  families(): ReadonlyArray<4 | 6> {
    return this.layouts.map((l) => l.family);
  }

  /** Free addresses below which a family gets another block in the background: a quarter block. */
  private lowWater(layout: BlockLayout): number {
    return Math.max(1, layout.blockAddresses >> 2);
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
      const layout = this.layoutOf(block);
      if (!layout) {
        this.opts.logger.warn({ block }, 'cached block is outside the configured cluster CIDRs; ignored');
        continue;
      }
      this.serve(block, layout, entry.endpoint);
      // A restart is no evidence a DPU is gone: each one's grace starts again.
      if (entry.endpoint !== undefined) this.dpus.seen(entry.endpoint);
    }
    allocator.onChange(() => this.claimAheadIfLow());
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
      (this.connected || this.layouts.every((l) => this.ownsBlockOf(l.family)))
    );
  }

  status(): PoolSourceStatus {
    const reasons: string[] = this.name.refusal ? [this.name.refusal] : [];
    const missing = this.layouts.filter((l) => !this.ownsBlockOf(l.family));
    const ready = this.isReady();
    for (const l of missing)
      if (!this.connected)
        reasons.push(
          `node ${this.opts.nodeName} owns no IPv${l.family} block of ${l.cluster.text} and etcd is unreachable${this.lastError ? ` (${this.lastError})` : ''}`,
        );
    if (ready && !this.connected)
      reasons.push(`etcd is unreachable (${this.lastError || 'connecting'}); serving from owned blocks only`);
    for (const f of this.full) reasons.push(`every IPv${f} block of the cluster CIDR is claimed`);
    reasons.push(...this.dpus.refused.values());
    for (const [block, owner] of this.lost)
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
    return this.waitForClaim(family, undefined);
  }

  /** needMore() for the node's own blocks (endpoint undefined) or for one DPU's. */
  private async waitForClaim(family: 4 | 6, endpoint: string | undefined): Promise<void> {
    const layout = this.layouts.find((l) => l.family === family);
    if (!layout) return;
    const whose =
      endpoint === undefined ? `node ${this.opts.nodeName}` : `DPU ${endpoint} of node ${this.opts.nodeName}`;
    // Blocks are claimed under the name only by the daemon holding it (node-name-hold.ts).
    if (this.connected && this.name.value === undefined)
      throw unavailable(
        `no free IPv${family} address in the blocks ${whose} owns, and no block is claimed: ` +
          (this.name.refusal ??
            `this daemon does not hold node name ${this.opts.nodeName} in etcd yet; retry`),
      );
    if (!this.connected) {
      throw unavailable(
        `no free IPv${family} address in the blocks ${whose} owns, and etcd is unreachable ` +
          `(${this.lastError || 'not connected yet'}); retry when etcd is back`,
      );
    }
    const free =
      endpoint === undefined ? this.allocator!.freeIn(family) : this.allocator!.freeFor(family, endpoint);
    if (this.full.has(family) && free === 0) {
      throw new WorkloadNetError(
        'RESOURCE_EXHAUSTED',
        `every IPv${family} block of ${layout.cluster.text} is claimed and this node's blocks are full`,
        true,
      );
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            unavailable(
              `no free IPv${family} address and claiming a block in etcd took over ${this.claimTimeoutMs} ms; retry`,
            ),
          ),
        this.claimTimeoutMs,
      );
    });
    try {
      await Promise.race([this.claim(layout, 'sync', endpoint), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.allocator?.onChange(undefined);
    // A clean stop says "not alive" at once; the blocks stay ours.
    await this.name.release(this.registry);
    this.client?.close();
  }

  private layoutOf(block: string): BlockLayout | undefined {
    return this.layouts.find((l) => blockIndex(l, block) !== undefined);
  }

  private ownsBlockOf(family: 4 | 6): boolean {
    for (const b of this.owned.values()) if (b.family === family) return true;
    return false;
  }

  /** Puts an owned block into the allocator, as a pool of `endpoint`'s ports when claimed for a DPU. */
  private serve(block: string, layout: BlockLayout, endpoint?: string): void {
    this.allocator!.addPool({
      cidr: block,
      wholeBlock: true,
      reserved: reservedInBlock(layout, block),
      ...(endpoint !== undefined ? { endpoint } : {}),
    });
    this.owned.set(block, { family: layout.family, ...(endpoint !== undefined ? { endpoint } : {}) });
    this.countBlocks();
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
    const claiming = [...this.claims.keys()].map((key) => key.slice(key.indexOf('/') + 1));
    const owning = [...this.owned.values()].map((b) => b.endpoint ?? '');
    return new Set([...owning, ...claiming].filter((e) => e !== ''));
  }

  private ownsBlockFor(family: 4 | 6, endpoint: string): boolean {
    for (const b of this.owned.values()) if (b.family === family && b.endpoint === endpoint) return true;
    return false;
  }

  private countBlocks(): void {
    for (const l of this.layouts)
      this.opts.metrics.blocksOwned.set(
        { family: String(l.family) },
        [...this.owned.values()].filter((b) => b.family === l.family).length,
      );
  }

  private claimAheadIfLow(): void {
    if (!this.connected || this.stopped || this.name.value === undefined || !this.allocator) return;
    const owners: Array<string | undefined> = this.perEndpoint ? [...this.endpointsServed()] : [undefined];
    for (const l of this.layouts)
      for (const endpoint of owners) {
        if (this.claims.has(claimKey(l.family, endpoint)) || this.full.has(l.family)) continue;
        if (this.freeOf(l.family, endpoint) < this.lowWater(l))
          this.claim(l, 'ahead', endpoint).catch((err: unknown) =>
            this.opts.logger.warn(
              { err: (err as Error).message, family: l.family, endpoint },
              'block claim ahead failed',
            ),
          );
      }
  }

  /** One claim per family and owner at a time; callers arriving meanwhile wait for the same one. */
  private claim(layout: BlockLayout, mode: 'ahead' | 'sync', endpoint?: string): Promise<void> {
    const key = claimKey(layout.family, endpoint);
    const running = this.claims.get(key);
    if (running) return running;
    const refused = endpoint === undefined ? undefined : this.dpus.refusal(endpoint, this.holders());
    if (refused !== undefined)
      return Promise.reject(new WorkloadNetError('RESOURCE_EXHAUSTED', refused, true));
    const p = this.doClaim(layout, mode, endpoint).finally(() => this.claims.delete(key));
    this.claims.set(key, p);
    return p;
  }

  private async doClaim(layout: BlockLayout, mode: 'ahead' | 'sync', endpoint?: string): Promise<void> {
    const started = process.hrtime.bigint();
    let result;
    try {
      result = await claimBlock(this.registry!, layout, this.owner(endpoint));
    } catch (err) {
      this.opts.metrics.blockClaims.inc({ outcome: 'error', mode });
      throw this.failed(err);
    }
    this.reachable();
    if ('full' in result) {
      this.full.add(layout.family);
      this.opts.metrics.blockClaims.inc({ outcome: 'full', mode });
      throw new WorkloadNetError(
        'RESOURCE_EXHAUSTED',
        `every IPv${layout.family} block of ${layout.cluster.text} is claimed by some node; ` +
          "release a dead node's blocks (workloadnet cluster release-node) or add a larger cluster CIDR",
        true,
      );
    }
    if (result.attempts > 1)
      this.opts.metrics.blockClaims.inc({ outcome: 'lost_race', mode }, result.attempts - 1);
    // Cache before serving: an address handed out must lie in a block the node knows after a crash.
    await this.cache!.add(result.block, {
      node: this.opts.nodeName,
      ...(endpoint !== undefined ? { endpoint } : {}),
      cluster: layout.cluster.text,
      claimedAt: new Date().toISOString(),
    });
    this.serve(result.block, layout, endpoint);
    this.opts.metrics.blockClaims.inc({ outcome: 'claimed', mode });
    this.opts.metrics.blockClaimSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9);
    this.opts.logger.info(
      { block: result.block, mode, attempts: result.attempts, endpoint },
      'claimed address block',
    );
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
      if (!this.synced || ++this.ticks % SYNC_EVERY_TICKS === 0) await this.sync();
      if (this.synced) {
        if (this.perEndpoint && this.ticks % LIVENESS_EVERY_TICKS === 0) await this.dpus.refresh();
        for (const l of this.layouts) {
          if (!this.perEndpoint && !this.ownsBlockOf(l.family))
            await this.claim(l, 'ahead').catch(() => undefined);
          if (this.perEndpoint)
            for (const e of this.endpointsServed())
              if (!this.ownsBlockFor(l.family, e)) await this.claim(l, 'ahead', e).catch(() => undefined);
        }
        this.claimAheadIfLow();
        await this.releaseEmptyBlocks();
      }
    } catch (err) {
      this.failed(err);
    } finally {
      this.ticking = false;
    }
  }

  /**
   * Reconciles the cached blocks with etcd, in etcd's favour: blocks etcd says are ours are served;
   * cached blocks etcd lost (a release cut short by a crash, or an operator's forced release) are
   * claimed again when free and dropped when empty; ones another node now owns drain.
   */
  private async sync(): Promise<void> {
    const affinities = await this.registry!.affinities();
    this.reachable();
    const me = this.opts.nodeName;
    const blocks = new Map([...affinities].map(([block, o]) => [block, o.node]));
    for (const [block, owner] of affinities) {
      const layout = this.layoutOf(block);
      if (owner.node !== me || !layout || this.owned.has(block)) continue;
      await this.cache!.add(block, {
        node: me,
        ...(owner.endpoint !== undefined ? { endpoint: owner.endpoint } : {}),
        cluster: layout.cluster.text,
        claimedAt: new Date().toISOString(),
      });
      this.serve(block, layout, owner.endpoint);
      this.opts.logger.info(
        { block, endpoint: owner.endpoint },
        'etcd lists a block of ours the cache lacked; serving it',
      );
    }
    for (const [block, b] of [...this.owned]) {
      const owner = blocks.get(block);
      if (owner === me) continue;
      const inUse = this.allocator!.report().find((p) => p.cidr === block)?.used ?? 0;
      if (owner === undefined && inUse > 0 && (await this.registry!.create(block, this.owner(b.endpoint)))) {
        this.opts.logger.warn(
          { block, inUse },
          'block with addresses in use was missing in etcd; claimed it again',
        );
        continue;
      }
      this.owned.delete(block);
      this.countBlocks();
      this.allocator!.drainPool(block);
      if (owner !== undefined && inUse > 0) this.lost.set(block, owner);
      if (owner === undefined || inUse === 0) await this.cache!.remove(block);
      this.opts.logger.warn(
        { block, owner, inUse },
        'cached block is not ours in etcd; stopped handing it out',
      );
    }
    for (const [block] of this.lost)
      if (this.allocator!.stateOf(block) === undefined) {
        this.lost.delete(block);
        await this.cache!.remove(block);
      }
    // Other nodes may have given blocks back since the range was found full: let claims try again.
    this.full.clear();
    this.synced = true;
  }

  /**
   * Gives back blocks that have been empty for the grace period, as long as the family keeps enough
   * free addresses without them (so the last block of a family is kept); a gone DPU's go back whatever
   * it keeps free. The block leaves the allocator first, in the same tick as the emptiness check, so no
   * attach can take an address of it while etcd deletes the key; if etcd refuses, it is served again.
   */
  private async releaseEmptyBlocks(): Promise<void> {
    const now = Date.now();
    const used = new Map(this.allocator!.report().map((p) => [p.cidr, p.used]));
    for (const [block, b] of this.owned) {
      if ((used.get(block) ?? 0) > 0) {
        b.emptySince = undefined;
        continue;
      }
      b.emptySince ??= now;
      if (now - b.emptySince < this.opts.emptyBlockGraceMs) continue;
      const layout = this.layoutOf(block)!;
      // A DPU keeps a quarter block free of its own, the node one across the family (as before DPUs);
      // a gone DPU keeps nothing free.
      const gone = b.endpoint !== undefined && this.dpus.isGone(b.endpoint);
      if (!gone && this.freeOf(b.family, b.endpoint) - layout.blockAddresses < this.lowWater(layout))
        continue;
      if (this.allocator!.drainPool(block) !== 'removed') continue;
      this.owned.delete(block);
      this.countBlocks();
      try {
        await this.registry!.release(block, this.owner(b.endpoint));
        await this.cache!.remove(block);
        this.full.delete(b.family);
        this.opts.metrics.blockReleases.inc();
        if (gone) this.dpus.released(block, b.endpoint!, this.holders().has(b.endpoint!));
        else this.opts.logger.info({ block }, 'released empty address block');
      } catch (err) {
        this.serve(block, layout, b.endpoint);
        throw err;
      }
    }
  }
}

const claimKey = (family: 4 | 6, endpoint: string | undefined): string => `${family}/${endpoint ?? ''}`;
