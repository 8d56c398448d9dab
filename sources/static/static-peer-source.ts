import { SerialRun } from '../../lib/serial-run';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../../core/logger';
import type { NodeRecord, Peer, PeerSource, PeerSourceStatus } from '../../core/peer-source';
import { vouchedEndpoints } from '../../core/fabric/endpoint-fields';
import { PeersFileReader, type PeersFileRejection } from './peers-file';
import { samePeer } from '../../core/fabric/peer-shape';
import { PrefixLedger, type PrefixClaim, type Settled } from '../../core/fabric/prefix-ledger';

// The peer source of a node without a cluster store: the peers a file lists (--peers-file), or none.
// The file is read again when it changes: fs.watch on its directory (editors and config managers
// replace a file by renaming another over it, which a watch on the file itself stops seeing) and a
// slow poll as a backstop for file systems that send no events. This node publishes nothing: the
// operator writes every node's entry, this one's included (it is skipped as a peer, and its prefixes
// and addresses are this node's own, which no peer's prefix may cover).
//
// An entry's prefixes are routed only as prefix-ledger.ts allows: inside the cluster ranges, over no
// underlay address, no range of this node, no prefix another entry holds. The incumbent is what the
// previous accepted read routed; between entries new in one read, the one listed first. A refused
// prefix costs its entry only that prefix (its other prefixes, and its DPUs' slices inside them, are
// routed), and is named in `rejected`; it is routed as soon as what blocked it goes.

export interface StaticPeerSourceOptions {
  /** The backstop poll (ms). */
  pollMs?: number;
  /**
   * The cluster's ranges (fabric.clusterCidrs): a prefix outside them is refused. Empty or absent:
   * not checked, since the daemon was not told the ranges (the other checks still hold).
   */
  clusterCidrs?: readonly string[];
  /** This node's own pools (every network's podCidrs): no peer's prefix may overlap them. */
  ownRanges?: readonly string[];
}

export class StaticPeerSource implements PeerSource {
  readonly kind = 'static';
  private table = new Map<string, Peer>();
  /** What the accepted file lists that is not routed, each with why. */
  private rejected: string[] = [];
  /** The entries of the last accepted read (this node's skipped), in the file's order. */
  private entries = new Map<string, Peer>();
  /** Each entry's place in the file, for the lines of `rejected`. */
  private places = new Map<string, number>();
  /** The reader's lines about the last accepted read (endpoint prefixes outside their entry's). */
  private readRejected: string[] = [];
  private loaded = false;
  private self = '';
  /** Why the file was refused (the previous table stays), or why there is none yet. */
  private problem?: string;
  private readonly listeners: Array<() => void> = [];
  private watcher?: fs.FSWatcher;
  private poll?: NodeJS.Timeout;
  /**
   * What the file held when last read: a poll that finds the same reads nothing. Kept as bytes, off
   * the JavaScript heap: a megabyte of text kept per read is old-generation garbage at the next.
   */
  private seen: Buffer = Buffer.alloc(0);
  /** Keeps what each entry was read as (peers-file.ts): an unchanged entry keeps its record. */
  private readonly reader = new PeersFileReader();
  /** Which entry holds which prefix, kept across reads: the incumbent keeps it. */
  private readonly ledger: PrefixLedger;
  /** The nodes last put into the ledger. */
  private claimed = new Set<string>();
  /** This node's record, and its own entry of the last accepted read. */
  private selfRecord?: NodeRecord;
  private ownEntry?: Peer;
  /** The narrowed record of an entry with prefixes refused, kept while the entry and its outcome are. */
  private readonly narrowed = new WeakMap<Peer, { key: string; peer: Peer }>();
  private readonly reads = new SerialRun(
    () => this.read(),
    () => this.stopped,
  );
  private stopped = false;

  constructor(
    /** Absolute path of the file; empty: no peers. */
    private readonly file: string,
    private readonly log: Logger,
    private readonly opts: StaticPeerSourceOptions = {},
  ) {
    this.ledger = new PrefixLedger({ cluster: opts.clusterCidrs ?? [], setting: 'fabric.clusterCidrs' });
  }

  get synced(): boolean {
    return this.loaded;
  }

  async start(self: NodeRecord): Promise<void> {
    this.self = self.node;
    this.selfRecord = self;
    this.stopped = false;
    if (this.file === '') {
      this.loaded = true;
      this.emit();
      return;
    }
    try {
      this.watcher = fs.watch(path.dirname(this.file), (_event, name) => {
        if (name === null || name === path.basename(this.file)) void this.reload();
      });
      this.watcher.on('error', (err) => {
        // The poll carries on alone (a directory removed and made again is seen by it).
        this.log.warn({ file: this.file, err: err.message }, 'peers file: watch failed; polling only');
        this.watcher?.close();
        this.watcher = undefined;
      });
    } catch (err) {
      this.log.warn(
        { file: this.file, err: (err as Error).message },
        'peers file: cannot watch; polling only',
      );
    }
    this.poll = setInterval(() => void this.reload(), this.opts.pollMs ?? 5000);
    this.poll.unref();
    await this.reload();
  }

  /**
   * The file is the operator's: this node publishes nothing into it. Its DPUs' addresses and slices
   * are this node's own, which no peer's prefix may cover: a change settles the table again.
   */
  async update(self: NodeRecord): Promise<void> {
    this.selfRecord = self;
    if (this.loaded && this.settle()) this.emit();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.watcher?.close();
    this.watcher = undefined;
    clearInterval(this.poll);
    await this.reads.current;
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.table;
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  status(): PeerSourceStatus {
    const reasons: string[] = [];
    if (this.problem)
      reasons.push(this.loaded ? `${this.problem} (the table read before is kept)` : this.problem);
    return { kind: this.kind, ready: this.loaded, connected: true, reasons, rejected: [...this.rejected] };
  }

  /** Reads the file now (what a change event or the poll does); one read at a time. */
  reload(): Promise<void> {
    return this.reads.run();
  }

  private async read(): Promise<void> {
    let bytes: Buffer;
    try {
      // Read as bytes and decoded once (read as text, a large file is decoded chunk by chunk), and only
      // when it changed.
      bytes = await fs.promises.readFile(this.file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      this.refuse(
        code === 'ENOENT'
          ? `peers file ${this.file} does not exist`
          : `cannot read peers file ${this.file}: ${(err as Error).message}`,
        Buffer.alloc(0),
      );
      return;
    }
    // Unchanged since it was last accepted or refused.
    if (bytes.equals(this.seen) && (this.loaded || this.problem !== undefined)) return;
    let parsed: Map<string, Peer>;
    let rejected: PeersFileRejection[];
    try {
      ({ peers: parsed, rejected } = this.reader.read(bytes, this.file));
    } catch (err) {
      this.refuse((err as Error).message, bytes);
      return;
    }
    this.seen = bytes;
    this.places = new Map([...parsed.keys()].map((node, i) => [node, i]));
    this.ownEntry = parsed.get(this.self);
    parsed.delete(this.self);
    this.entries = parsed;
    // This node's own entry is skipped, and so is what it says of itself.
    this.readRejected = rejected.filter((r) => r.node !== this.self).map((r) => r.why);
    const refused = this.problem !== undefined;
    if (this.problem) this.log.info({ file: this.file }, 'peers file: read again, accepted');
    this.problem = undefined;
    const changed = this.settle() || !this.loaded;
    this.loaded = true;
    if (changed || refused) this.emit();
  }

  /**
   * Works out the table from the entries of the last accepted read and what this node is: each
   * entry's prefixes as the ledger settles them. True when the table or `rejected` changed.
   */
  private settle(): boolean {
    const self = this.selfRecord;
    const own = [...(this.opts.ownRanges ?? []), ...(this.ownEntry?.prefixes ?? [])];
    const underlay = [...(self?.underlay ?? []), ...(this.ownEntry?.underlay ?? [])];
    for (const e of [...(self?.endpoints ?? []), ...(this.ownEntry?.endpoints ?? [])]) {
      own.push(...e.prefixes);
      underlay.push(e.underlay);
    }
    this.ledger.setSelf(own, underlay);
    for (const node of this.claimed) if (!this.entries.has(node)) this.ledger.remove(node);
    this.ledger.put([...this.entries.values()].map(claimOf));
    this.claimed = new Set(this.entries.keys());
    const table = new Map<string, Peer>();
    const lines = [...this.readRejected];
    for (const peer of this.entries.values()) {
      const settled = this.ledger.outcome(peer.node) ?? { accepted: peer.prefixes, refused: [] };
      const at = `peers file ${this.file}: peers[${this.places.get(peer.node) ?? 0}] (node ${peer.node})`;
      if (settled.whole !== undefined) {
        lines.push(`${at}: not routed: ${settled.whole}`);
        continue;
      }
      for (const why of settled.refused)
        lines.push(`${at}.prefixes: ${why}; prefix not routed, the entry's other prefixes are`);
      const routed = this.routed(peer, settled);
      lines.push(...routed.rejected);
      table.set(peer.node, routed.peer);
    }
    const tableChanged = !sameTable(this.table, table);
    const linesChanged =
      lines.length !== this.rejected.length || lines.some((l, i) => l !== this.rejected[i]);
    if (tableChanged) this.log.info({ file: this.file, peers: table.size }, 'peers file: table changed');
    if (linesChanged && lines.length > 0)
      this.log.warn(
        { file: this.file, rejected: lines.slice(0, 5), count: lines.length },
        'peers file: not all of it is routed',
      );
    this.table = table;
    this.rejected = lines;
    return tableChanged || linesChanged;
  }

  /** The entry as it is routed: itself when nothing of it is refused, else narrowed to what is. */
  private routed(peer: Peer, settled: Settled): { peer: Peer; rejected: string[] } {
    if (settled.refused.length === 0) return { peer, rejected: [] };
    const key = JSON.stringify(settled.accepted);
    const kept = this.narrowed.get(peer);
    const vouched = peer.endpoints
      ? vouchedEndpoints(peer.node, peer.endpoints, settled.accepted, "its entry's routed prefixes")
      : undefined;
    if (kept?.key === key) return { peer: kept.peer, rejected: vouched?.rejected ?? [] };
    const narrowed: Peer = {
      ...peer,
      ...(vouched ? { endpoints: vouched.endpoints } : {}),
      prefixes: settled.accepted,
    };
    this.narrowed.set(peer, { key, peer: narrowed });
    return { peer: narrowed, rejected: vouched?.rejected ?? [] };
  }

  private refuse(problem: string, bytes: Buffer): void {
    this.seen = bytes;
    if (problem === this.problem) return;
    this.log.warn({ file: this.file, err: problem }, 'peers file refused');
    this.problem = problem;
    // Listeners read status() too: a refused file is news even when the table stays.
    this.emit();
  }

  private emit(): void {
    for (const l of this.listeners) l();
  }
}

/** What an entry claims: its prefixes, over its addresses and its DPUs'. */
function claimOf(peer: Peer): PrefixClaim {
  const underlay = peer.endpoints
    ? [...peer.underlay, ...peer.endpoints.map((e) => e.underlay)]
    : peer.underlay;
  return { node: peer.node, prefixes: peer.prefixes, underlay };
}

function sameTable(a: ReadonlyMap<string, Peer>, b: ReadonlyMap<string, Peer>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (!samePeer(v, b.get(k))) return false;
  return true;
}
