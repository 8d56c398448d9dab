import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../logger';
import type { Peer } from '../peer-source';

// The last peer table this node applied, kept beside the store. The withdrawal grace lives in memory;
// without this file a restart would forget which peers were programmed, and a peer missing from the
// first list after the restart would lose its routes at once instead of after the grace. Written whole
// to a temporary file renamed over the old one (a reader never sees half of it), at most once per
// interval: at 5,000 peers a table is about a megabyte, and changes come several times a second.

export interface AppliedPeersFileOptions {
  /** Least time between two writes (ms); the last table within it is written at its end. */
  minIntervalMs?: number;
}

interface FileShape {
  version: 1;
  savedAt: string;
  peers: Peer[];
}

export class AppliedPeersFile {
  private pending?: readonly Peer[];
  private timer?: NodeJS.Timeout;
  private lastWrite = 0;

  constructor(
    readonly file: string,
    private readonly log: Logger,
    private readonly opts: AppliedPeersFileOptions = {},
  ) {}

  /** The table of the last run; empty when there is none or it cannot be read (said in the log). */
  load(): Peer[] {
    let text: string;
    try {
      text = fs.readFileSync(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
        this.log.warn({ file: this.file, err: (err as Error).message }, 'last peer table not read');
      return [];
    }
    try {
      const parsed = JSON.parse(text) as Partial<FileShape>;
      if (parsed.version !== 1 || !Array.isArray(parsed.peers)) throw new Error('not a version 1 peer table');
      return parsed.peers.filter(isPeer);
    } catch (err) {
      this.log.warn({ file: this.file, err: (err as Error).message }, 'last peer table ignored');
      return [];
    }
  }

  /** Keeps `peers` as the last applied table (written now, or at the end of the interval). */
  save(peers: readonly Peer[]): void {
    this.pending = peers;
    if (this.timer) return;
    // Never written in the caller's turn, also when due: the apply that saves is sending the table's
    // changes to the dataplanes, and a megabyte made into text and written would hold them back.
    const wait = Math.max(0, this.lastWrite + (this.opts.minIntervalMs ?? 5_000) - Date.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.write();
    }, wait);
    this.timer.unref();
  }

  /** Writes what is pending now (at stop). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.write();
  }

  private write(): void {
    const peers = this.pending;
    if (!peers) return;
    this.pending = undefined;
    this.lastWrite = Date.now();
    const body: FileShape = { version: 1, savedAt: new Date().toISOString(), peers: [...peers] };
    const tmp = path.join(path.dirname(this.file), `.${path.basename(this.file)}.${process.pid}.tmp`);
    try {
      fs.writeFileSync(tmp, JSON.stringify(body));
      fs.renameSync(tmp, this.file);
    } catch (err) {
      // Not fatal: the routes are in the kernel; only a restart's grace depends on this file.
      this.log.warn({ file: this.file, err: (err as Error).message }, 'last peer table not written');
      fs.rmSync(tmp, { force: true });
    }
  }
}

function isPeer(p: unknown): p is Peer {
  const o = p as Partial<Peer> | null;
  return (
    typeof o === 'object' &&
    o !== null &&
    typeof o.node === 'string' &&
    Array.isArray(o.underlay) &&
    Array.isArray(o.prefixes) &&
    o.prefixes.every((x) => typeof x === 'string')
  );
}
