import { SerialRun } from '../../lib/serial-run';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../logger';
import type { NodeRecord, Peer, PeerSource, PeerSourceStatus } from './peer-source';
import { PeersFileReader, type PeersFileRejection } from './peers-file';
import { samePeer } from './peer-shape';

// The peer source of a node without a cluster store: the peers a file lists (--peers-file), or none.
// The file is read again when it changes: fs.watch on its directory (editors and config managers
// replace a file by renaming another over it, which a watch on the file itself stops seeing) and a
// slow poll as a backstop for file systems that send no events. This node publishes nothing: the
// operator writes every node's entry, this one's included (it is skipped here).

export interface StaticPeerSourceOptions {
  /** The backstop poll (ms). */
  pollMs?: number;
}

export class StaticPeerSource implements PeerSource {
  readonly kind = 'static';
  private table = new Map<string, Peer>();
  /** Endpoint prefixes the accepted file lists outside their entry's prefixes, each with why. */
  private rejected: string[] = [];
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
  ) {}

  get synced(): boolean {
    return this.loaded;
  }

  async start(self: NodeRecord): Promise<void> {
    this.self = self.node;
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

  /** The file is the operator's: this node publishes nothing into it. */
  async update(_self: NodeRecord): Promise<void> {}

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
    parsed.delete(this.self);
    // This node's own entry is skipped, and so is what it says of itself.
    this.rejected = rejected.filter((r) => r.node !== this.self).map((r) => r.why);
    const changed = !this.loaded || !sameTable(this.table, parsed);
    if (this.problem) this.log.info({ file: this.file }, 'peers file: read again, accepted');
    this.problem = undefined;
    this.table = parsed;
    this.loaded = true;
    if (changed) {
      this.log.info({ file: this.file, peers: parsed.size }, 'peers file: table changed');
      this.emit();
    }
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

function sameTable(a: ReadonlyMap<string, Peer>, b: ReadonlyMap<string, Peer>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (!samePeer(v, b.get(k))) return false;
  return true;
}
