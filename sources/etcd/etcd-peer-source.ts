import { Etcd3, Range, type IKeyValue, type IWatchResponse, type Watcher } from 'etcd3';
import { invalidArgument } from '../../core/errors';
import type { Logger } from '../../core/logger';
import type { NodeRecord, Peer, PeerSource, PeerSourceStatus } from '../../core/peer-source';
import { aliveHolder } from './alive-key';
import { blockLayout, type BlockLayout } from './block-layout';
import { aliveKey } from './block-registry';
import { etcdClientOptions } from './etcd-client';
import { decodeRecord, encodeRecord } from './node-record';
import { PeerTable, recordKey } from './peer-table';
import { RecordPublisher } from './record-publisher';

// The other nodes from etcd, where the etcd pool source keeps block ownership (see
// docs/fabric.md). Layout under the configured prefix:
//   nodes/<node>   JSON NodeRecord, bound to a lease kept alive by that node's daemon (TTL
//                  fabric.leaseTtlSeconds): a dead node's record expires, nobody deletes it. Only
//                  the daemon holding the name (its alive key, nodes/<node>/alive) writes it, stamped
//                  with its store id and boot; a record another writer put there is not routed while
//                  the name is held (peer-table.ts).
//   blocks/<block> the owning node (written by the pool source): the only source of a peer's prefixes.
// One range read of the whole prefix gives records and ownership at one revision; a watch of the
// prefix from the next revision follows it. A dropped watch resumes from the last revision applied;
// when etcd has compacted that revision (the watch is cancelled), the source lists again. Losing etcd
// never empties the table: the last list stands until a newer one says otherwise.

/** Keys per page of a full list. */
const LIST_PAGE = 1000;
/** How long a stop waits for etcd to confirm the watch's cancellation. */
const STOP_WAIT_MS = 1000;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

export interface EtcdPeerSourceOptions {
  endpoints: string[];
  tls?: { ca: string; cert?: string; key?: string };
  /** Key prefix (the pool source's). */
  prefix: string;
  /** The pool source's cluster CIDRs and IPv4 block size: blocks outside them are never routed. */
  clusterCidrs: string[];
  blockSize: number;
  nodeName: string;
  /**
   * This daemon's store id (core/store StoreIdentity), read at start: with the boot id, what the node
   * name's alive key must name for this daemon to publish the record.
   */
  storeId: () => string;
  /** TTL of the node record's lease (s). */
  leaseTtlSeconds: number;
  logger: Logger;
  /** Deadline of one etcd call (ms). */
  callTimeoutMs?: number;
  /** Keys per page of a full list. */
  listPage?: number;
  /** Period of the maintenance loop: publish, list, watch again (ms). */
  tickMs?: number;
}

export class EtcdPeerSource implements PeerSource {
  readonly kind = 'etcd';
  private readonly root: string;
  private readonly layouts: BlockLayout[];
  private readonly table: PeerTable;
  private readonly listeners: Array<() => void> = [];
  private client?: Etcd3;
  private publisher?: RecordPublisher;
  private self?: NodeRecord;
  private watcher?: Watcher;
  /** Last revision the table reflects. */
  private revision = 0;
  private needList = true;
  private isSynced = false;
  private connected = false;
  private lastError = '';
  private timer?: NodeJS.Timeout;
  private ticking = false;
  private stopped = false;
  private lists = 0;
  private resumes = 0;
  /** The last watch ended by a drop: the next one resumes from our revision. */
  private resumesPending = false;

  constructor(private readonly opts: EtcdPeerSourceOptions) {
    this.root = `${opts.prefix}/`;
    this.layouts = opts.clusterCidrs.map((c) => blockLayout(c, opts.blockSize));
    this.table = new PeerTable(opts.nodeName, this.layouts);
  }

  get synced(): boolean {
    return this.isSynced;
  }

  /** Full lists done so far (the first, and one per compaction or cancelled watch). */
  get listCount(): number {
    return this.lists;
  }

  /** Watches created again from the last revision after a drop, without a list. */
  get resumeCount(): number {
    return this.resumes;
  }

  /** Refuses a record of another node, or one other nodes would ignore, before connecting anything. */
  async start(self: NodeRecord): Promise<void> {
    this.check(self);
    this.self = self;
    this.client = new Etcd3(
      etcdClientOptions({
        endpoints: this.opts.endpoints,
        tls: this.opts.tls,
        callTimeoutMs: this.opts.callTimeoutMs ?? 2000,
      }),
    );
    this.publisher = new RecordPublisher(
      this.client,
      this.root + recordKey(self.node),
      { key: this.root + aliveKey(self.node), me: aliveHolder(this.opts.storeId()) },
      this.opts.leaseTtlSeconds,
      this.opts.logger,
      (err) => {
        this.opts.logger.warn({ err: err.message }, 'node record lease lost; granting a new one');
        this.failed(err);
      },
    );
    this.timer = setInterval(() => void this.tick(), this.opts.tickMs ?? 1000);
    this.timer.unref();
    void this.tick();
  }

  /**
   * Publishes the changed record now, under the lease the old one lives on (no moment without a
   * record). Refused like start() when other nodes would ignore it; when etcd fails, the maintenance
   * tick publishes it once etcd answers (Status says it is not published meanwhile).
   */
  async update(self: NodeRecord): Promise<void> {
    this.check(self);
    this.self = self;
    if (!this.publisher || this.stopped) return;
    await this.publisher.ensure(self).then(
      (answered) => answered && this.reachable(),
      (err: unknown) => this.failed(err),
    );
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    const w = this.watcher;
    this.watcher = undefined;
    // A cancel waits for etcd's answer; a member that no longer answers must not hold the stop up.
    await Promise.race([w?.cancel().catch(() => undefined), sleep(STOP_WAIT_MS)]);
    // The record stays: a restart must not withdraw the node; its lease expires if it is really gone.
    this.publisher?.stop();
    this.client?.close();
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.table.peers();
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  status(): PeerSourceStatus {
    const reasons: string[] = [];
    if (!this.isSynced)
      reasons.push(`no full list of nodes from etcd yet${this.lastError ? ` (${this.lastError})` : ''}`);
    else if (!this.connected)
      reasons.push(
        `etcd is unreachable (${this.lastError || 'reconnecting'}); keeping the last known ` +
          `${this.table.peers().size} peers`,
      );
    if (this.publisher?.refusal) reasons.push(this.publisher.refusal);
    else if (this.self && !this.publisher?.published)
      reasons.push(`node record of ${this.self.node} not published in etcd yet`);
    else if (this.self && !this.publisher?.holds(this.self))
      reasons.push(`the changed node record of ${this.self.node} is not published in etcd yet`);
    const unrouted = this.table.unroutedReason();
    if (unrouted) reasons.push(unrouted);
    return {
      kind: this.kind,
      ready: this.isSynced,
      connected: this.connected,
      reasons,
      rejected: [...this.table.rejected()],
    };
  }

  private check(self: NodeRecord): void {
    if (self.node !== this.opts.nodeName)
      throw invalidArgument(
        `node record names ${self.node}, but this source serves node ${this.opts.nodeName}`,
      );
    try {
      decodeRecord(self.node, encodeRecord(self));
    } catch (err) {
      throw invalidArgument(`this node's record ${(err as Error).message}; other nodes would ignore it`);
    }
  }

  /** Maintenance: keep the record published, list when needed, watch again after a drop. */
  private async tick(): Promise<void> {
    if (this.ticking || this.stopped) return;
    this.ticking = true;
    try {
      await this.publisher!.ensure(this.self!).then(
        (answered) => answered && this.reachable(),
        (err: unknown) => this.failed(err),
      );
      if (this.stopped) return;
      if (this.needList) await this.list();
      if (!this.watcher && !this.stopped) this.watch();
    } catch (err) {
      this.failed(err);
    } finally {
      this.ticking = false;
    }
  }

  /**
   * Records and block ownership as of one revision: the whole prefix, read in pages pinned to the
   * revision of the first (one response for 5,000 nodes would pass gRPC's 4 MiB message limit).
   */
  private async list(): Promise<void> {
    const all = Range.prefix(this.root);
    let start = all.start;
    let revision: string | undefined;
    const kvs: IKeyValue[] = [];
    for (;;) {
      const page = this.client!.getAll()
        .inRange(new Range(start, all.end))
        .limit(this.opts.listPage ?? LIST_PAGE);
      if (revision !== undefined) page.revision(revision);
      const res = await page.exec();
      revision ??= res.header.revision;
      kvs.push(...res.kvs);
      if (!res.more || res.kvs.length === 0) break;
      start = Buffer.concat([res.kvs[res.kvs.length - 1]!.key, Buffer.from([0])]);
    }
    this.table.clear();
    for (const kv of kvs)
      this.table.put(kv.key.toString().slice(this.root.length), kv.value.toString(), kv.lease);
    this.revision = Number(revision);
    this.needList = false;
    this.lists++;
    this.reachable();
    this.checkOwnRecord();
    const changed = this.table.recompute();
    const first = !this.isSynced;
    this.isSynced = true;
    this.opts.logger.info(
      { revision: this.revision, peers: this.table.peers().size, first },
      'listed nodes and blocks from etcd',
    );
    if (changed || first) this.notify();
  }

  /**
   * Follows the prefix from the revision after the last one applied. The watcher is built with
   * watcher() rather than create() so the handlers are in place before the first response arrives.
   * The library resumes a dropped stream itself, but from the revision of the watch's creation reply
   * rather than of the last event delivered; so a drop ends this watcher, and the next tick starts
   * one from our own revision.
   */
  private watch(): void {
    const resumed = this.lists > 0 && this.revision > 0 && this.resumesPending;
    const w = this.client!.watch()
      .prefix(this.root)
      .startRevision(String(this.revision + 1))
      .watcher();
    this.watcher = w;
    if (resumed) this.resumes++;
    this.resumesPending = false;
    w.on('connected', () => {
      if (this.watcher === w) this.reachable();
    });
    w.on('data', (res: IWatchResponse) => {
      if (this.watcher === w) this.apply(res);
    });
    w.on('disconnected', (err: Error) => {
      if (this.watcher !== w) return;
      this.watcher = undefined;
      this.resumesPending = true;
      this.failed(err);
      void w.cancel().catch(() => undefined);
    });
    w.on('error', (err: Error) => {
      // Cancelled by etcd: the start revision was compacted away (or access was taken). The changes in
      // between are lost, so only a new full list can say what is there now.
      if (this.watcher !== w) return;
      this.watcher = undefined;
      this.needList = true;
      this.opts.logger.warn(
        { err: err.message, revision: this.revision },
        'etcd cancelled the watch of nodes and blocks; listing again',
      );
    });
  }

  private apply(res: IWatchResponse): void {
    for (const ev of res.events) {
      const key = ev.kv.key.toString();
      if (!key.startsWith(this.root)) continue;
      const rel = key.slice(this.root.length);
      if (ev.type === 'Put') this.table.put(rel, ev.kv.value.toString(), ev.kv.lease);
      else this.table.delete(rel);
    }
    this.revision = Math.max(this.revision, Number(res.header.revision));
    this.reachable();
    if (res.events.length === 0) return;
    this.checkOwnRecord();
    if (this.table.recompute()) this.notify();
  }

  /**
   * Our record gone, changed or taken off our lease while we think it is published (deleted or
   * overwritten by hand, or by another daemon): write it again, if this daemon still holds the name.
   */
  private checkOwnRecord(): void {
    const value = this.publisher?.value;
    // A table older than our write cannot show it yet.
    if (value === undefined || this.revision < this.publisher!.writtenAt) return;
    const stored = this.table.ownRecord();
    if (stored?.value !== value || stored.lease !== this.publisher!.leaseOfRecord) {
      this.opts.logger.warn(
        { node: this.opts.nodeName },
        'own node record changed in etcd; writing it again',
      );
      this.publisher!.forget();
    }
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
    if (!this.connected) this.opts.logger.info({ endpoints: this.opts.endpoints }, 'etcd reachable (peers)');
    this.connected = true;
    this.lastError = '';
  }

  private failed(err: unknown): void {
    const message = err instanceof Error ? err.message : String(err);
    if (this.connected) this.opts.logger.warn({ err: message }, 'etcd unreachable (peers)');
    this.connected = false;
    this.lastError = message.split('\n')[0]!.slice(0, 200);
  }
}
