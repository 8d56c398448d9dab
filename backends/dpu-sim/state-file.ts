import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type {
  Endpoint,
  FabricObject,
  Inventory,
  PeerState,
  Port,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { VfSlot } from './vf-pool';

// The simulator's state, written as JSON for tests and operators to read (readStateFile). Each full
// write goes to a temporary file that is then renamed over the old one, so a reader never sees half a
// file. Writes are coalesced: a burst of changes (a 5,000-port snapshot) costs a few rewrites, not one
// per port, and the file always ends up showing the latest state.
//
// At 5,000 peers the state holds ~10,000 fabric objects (some 3 MB of JSON), and rewriting all of it
// for every peer that changes would be most of what one change costs the simulator. So between writes,
// a write appends one line to a journal beside the file (<file>.journal): the small fields as they are
// now, the fabric objects set and deleted since the last write, and the PeerStatus when it changed.
// Once the journal outgrows a bound, the next write is a full one again and empties it. Each journal
// line names the full file it follows, so that lines a crash left behind a newer full file are skipped;
// a line cut short by a crash is the last one and is ignored.
//
// The file (with its journal) is also what a restart with the same boot id resumes: the DPU's memory.
// So a change counts as kept only once a write that contains it has landed (kept()), and the agent
// acks nothing before that: an ack whose change a SIGKILL could still undo would let the daemon forget
// a Delete the resumed table then brings back.

export interface StatePort extends Port {
  endpoint?: Endpoint;
  representor?: string;
  vf?: VfSlot;
}

export interface SessionInfo {
  state: 'connecting' | 'connected' | 'rejected' | 'disconnected';
  sessionId?: string;
  /** Why the last session ended or was refused. */
  reason?: string;
  /** Hellos the daemon refused since the process started, and the last reason given. */
  rejections?: number;
  lastRejectReason?: string;
}

export interface SimState {
  agentId: string;
  bootId: string;
  pid: number;
  /** True once the current session's snapshot has been applied (stale ports removed). */
  synced: boolean;
  /** Epoch of the last snapshot applied. */
  epoch: number;
  session: SessionInfo;
  /** The protocol version of the current session (0 while none is accepted). */
  protocolVersion?: number;
  /** Inventories sent since the process started, and the last one. */
  inventoriesSent?: number;
  inventory?: Omit<Inventory, 'pfs'> & { pfs: Array<Omit<Inventory['pfs'][number], 'vfs'>> };
  ports: StatePort[];
  /**
   * Protocol version 3: the fabric objects held, by name (absent in files of older simulators, read as
   * none), the uplink the last hello stated, and the PeerStatus messages sent and the last one.
   */
  fabric?: FabricObject[];
  uplink?: { addresses: string[]; mtu: number };
  peerStatusesSent?: number;
  peerStatus?: PeerState[];
  /** Names this full file: the journal lines written after it name it too (see readStateFile). */
  journalBase?: string;
}

export const journalOf = (file: string): string => `${file}.journal`;

/** One journal line: what changed since the write before it. */
interface JournalLine {
  /** The full file it follows (its journalBase). */
  base: string;
  head: Omit<SimState, 'fabric' | 'peerStatus'>;
  set?: FabricObject[];
  del?: string[];
  /** The PeerStatus whole, or (peerStatusSet, peerStatusGone) what changed in it by peer name. */
  peerStatus?: PeerState[];
  peerStatusSet?: PeerState[];
  peerStatusGone?: string[];
}

/** The state as the file and its journal hold it together; undefined when there is none (yet). */
export function readStateFile(file: string): SimState | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  const parsed = JSON.parse(text) as SimState;
  if (!parsed || typeof parsed !== 'object' || !Array.isArray(parsed.ports)) return undefined;
  let journal: string;
  try {
    journal = fs.readFileSync(journalOf(file), 'utf8');
  } catch {
    return parsed;
  }
  let state = parsed;
  const fabric = new Map((parsed.fabric ?? []).map((o) => [o.name, o]));
  let changed = false;
  for (const text of journal.split('\n')) {
    if (text === '') continue;
    let line: JournalLine;
    try {
      line = JSON.parse(text) as JournalLine;
    } catch {
      break;
    }
    // Lines of an earlier full file (a crash between its replacement and emptying the journal).
    if (line.base !== parsed.journalBase) continue;
    changed = true;
    state = { ...line.head, fabric: state.fabric, peerStatus: replayPeerStatus(state.peerStatus, line) };
    for (const name of line.del ?? []) fabric.delete(name);
    for (const o of line.set ?? []) fabric.set(o.name, o);
  }
  if (!changed) return parsed;
  const { peerStatus, ...rest } = state;
  return {
    ...rest,
    fabric: [...fabric.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    ...(peerStatus ? { peerStatus } : {}),
  };
}

/**
 * The PeerStatus after a journal line: its whole list, or the one before with the states it set and
 * the names gone, ordered by name (as the simulator lists its peers: FabricTable.peers()).
 */
function replayPeerStatus(before: PeerState[] | undefined, line: JournalLine): PeerState[] | undefined {
  if (line.peerStatus) return line.peerStatus;
  if (!line.peerStatusSet && !line.peerStatusGone) return before;
  const byName = new Map((before ?? []).map((p) => [p.name, p]));
  for (const name of line.peerStatusGone ?? []) byName.delete(name);
  for (const p of line.peerStatusSet ?? []) byName.set(p.name, p);
  return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** A journal this long is folded into a full write. */
const JOURNAL_LIMIT_BYTES = 4 * 1024 * 1024;

export class StateFile {
  private writing: Promise<void> | undefined;
  private dirty = false;
  /** Changes noted so far, and how many of them the file on disk holds. */
  private noted = 0;
  private written = 0;
  private readonly keptWaiters: Array<{ upTo: number; resolve: () => void }> = [];
  /**
   * What the file and journal hold now, by object identity (objects are replaced, never changed in
   * place): the next journal line is what differs. Undefined until this process wrote a full file.
   */
  private base:
    | {
        id: string;
        fabric: Map<string, FabricObject>;
        peerStatus: PeerState[] | undefined;
        /** Each state of the last PeerStatus written, as text, by peer name. */
        peerStatusTexts: Map<string, string>;
      }
    | undefined;
  private journalBytes = 0;

  /** `writeDelayMs` stands for a slow disk: each write lands that long after it rendered the state. */
  constructor(
    private readonly file: string | undefined,
    private readonly render: () => SimState,
    private readonly writeDelayMs = 0,
  ) {}

  /** Notes a change; the file is rewritten soon, with whatever the state is by then. */
  changed(): void {
    if (!this.file) return;
    this.noted += 1;
    this.dirty = true;
    this.writing ??= this.drain();
  }

  /**
   * Resolves once the file holds every change noted so far, so that a restart of the same boot would
   * resume them; at once without a file (nothing is resumed then).
   */
  kept(): Promise<void> {
    if (!this.file || this.written >= this.noted) return Promise.resolve();
    return new Promise((resolve) => this.keptWaiters.push({ upTo: this.noted, resolve }));
  }

  private async drain(): Promise<void> {
    try {
      while (this.dirty) {
        this.dirty = false;
        await this.writeAsync();
      }
    } finally {
      this.writing = undefined;
    }
  }

  private async writeAsync(): Promise<void> {
    const file = this.file as string;
    // Everything noted up to here is in what render() returns now.
    const holds = this.noted;
    const state = this.render();
    const line = this.journalLine(state);
    const text = line ?? this.fullText(state);
    if (this.writeDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.writeDelayMs));
    // A synchronous write (before exiting) may have landed newer state meanwhile.
    if (this.written >= holds) return;
    if (line !== undefined) {
      try {
        await fs.promises.appendFile(journalOf(file), line);
      } catch (err) {
        // What the line held is not on disk: the next write is a full one.
        this.base = undefined;
        throw err;
      }
      this.journalBytes += line.length;
    } else {
      const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
      await fs.promises.writeFile(tmp, text);
      await fs.promises.rename(tmp, file);
      // Lines left in the journal name the file before: readers skip them.
      await fs.promises.writeFile(journalOf(file), '');
      this.journalBytes = 0;
    }
    this.landed(holds);
  }

  /**
   * The journal line for `state` against what was last written, and notes it as written; undefined
   * when a full write is due (none yet in this process, or the journal is long).
   */
  private journalLine(state: SimState): string | undefined {
    if (!this.base || this.journalBytes >= JOURNAL_LIMIT_BYTES) return undefined;
    const { fabric = [], peerStatus, ...head } = state;
    const base = this.base;
    const set: FabricObject[] = [];
    for (const o of fabric) {
      if (base.fabric.get(o.name) === o) continue;
      set.push(o);
      base.fabric.set(o.name, o);
    }
    // Every current name is in the map now: more names there are the ones deleted (rare: scan then).
    let del: string[] = [];
    if (base.fabric.size > fabric.length) {
      const now = new Set(fabric.map((o) => o.name));
      del = [...base.fabric.keys()].filter((n) => !now.has(n));
      for (const n of del) base.fabric.delete(n);
    }
    const line: JournalLine = {
      base: base.id,
      head,
      ...(set.length > 0 ? { set } : {}),
      ...(del.length > 0 ? { del } : {}),
      ...(peerStatus && peerStatus !== base.peerStatus ? peerStatusChange(peerStatus, base) : {}),
    };
    base.peerStatus = peerStatus;
    return `${JSON.stringify(line)}\n`;
  }

  /** The full file for `state`, noted as what was last written. */
  private fullText(state: SimState): string {
    const id = randomUUID();
    this.base = {
      id,
      fabric: new Map((state.fabric ?? []).map((o) => [o.name, o])),
      peerStatus: state.peerStatus,
      peerStatusTexts: new Map((state.peerStatus ?? []).map((p) => [p.name, JSON.stringify(p)])),
    };
    return JSON.stringify({ ...state, journalBase: id }, null, 1);
  }

  private landed(holds: number): void {
    this.written = Math.max(this.written, holds);
    // Waiters queue in the order of the changes they wait for.
    while (this.keptWaiters[0] && this.keptWaiters[0].upTo <= this.written)
      this.keptWaiters.shift()?.resolve();
  }

  /** Waits until everything noted so far is on disk. */
  async flush(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /** Writes the current state right now, synchronously (before exiting). */
  writeNow(): void {
    if (!this.file) return;
    const holds = this.noted;
    const tmp = path.join(path.dirname(this.file), `.${path.basename(this.file)}.${process.pid}.sync.tmp`);
    fs.writeFileSync(tmp, this.fullText(this.render()));
    fs.renameSync(tmp, this.file);
    fs.writeFileSync(journalOf(this.file), '');
    this.journalBytes = 0;
    this.landed(holds);
  }
}

/**
 * What a journal line says of a PeerStatus against the last one written (`base`, updated): the states
 * that changed and the names gone. A PeerStatus comes after every change and lists every peer (some
 * 300 KB at 5,000): written whole each time it moved, the journal would outgrow its bound every dozen
 * changes, and the full write of ~3 MB that follows holds that change's ack back. Whole only when the
 * list is not ordered by name (the replay orders it so).
 */
function peerStatusChange(
  peerStatus: PeerState[],
  base: { peerStatusTexts: Map<string, string> },
): Pick<JournalLine, 'peerStatus' | 'peerStatusSet' | 'peerStatusGone'> {
  const texts = base.peerStatusTexts;
  const now = new Map<string, string>();
  const set: PeerState[] = [];
  let ordered = true;
  let last = '';
  for (const p of peerStatus) {
    const text = JSON.stringify(p);
    now.set(p.name, text);
    if (texts.get(p.name) !== text) set.push(p);
    if (p.name <= last) ordered = false;
    last = p.name;
  }
  const gone: string[] = [];
  for (const name of texts.keys()) if (!now.has(name)) gone.push(name);
  base.peerStatusTexts = now;
  if (!ordered) return { peerStatus };
  return {
    ...(set.length > 0 ? { peerStatusSet: set } : {}),
    ...(gone.length > 0 ? { peerStatusGone: gone } : {}),
  };
}
