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

// The simulator's state, written as JSON for tests and operators to read. Each write goes to a
// temporary file that is then renamed over the old one, so a reader never sees half a file. Writes are
// coalesced: a burst of changes (a 5,000-port snapshot) costs a few rewrites, not one per port, and the
// file always ends up showing the latest state.
//
// At 5,000 peers the file holds ~10,000 fabric objects and a PeerStatus of 5,000 (a few MB), and each
// change to one of them is one write: so the long lists are written one element per line, each element's
// text kept with the (never mutated) object it was made from, and a write joins what is mostly made.
//
// The file is also what a restart with the same boot id resumes: the DPU's memory. So a change counts
// as kept only once a write that contains it has landed (kept()), and the agent acks nothing before
// that: an ack whose change a SIGKILL could still undo would let the daemon forget a Delete the
// resumed table then brings back.

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
}

export function readStateFile(file: string): SimState | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  const parsed = JSON.parse(text) as SimState;
  return parsed && typeof parsed === 'object' && Array.isArray(parsed.ports) ? parsed : undefined;
}

/** Each element's JSON text, made once per object: the objects are replaced, never changed in place. */
const texts = new WeakMap<object, string>();
function textOf(o: object): string {
  let t = texts.get(o);
  if (t === undefined) {
    t = JSON.stringify(o);
    texts.set(o, t);
  }
  return t;
}

/** A list as JSON, one element per line. */
function listText(list: readonly object[]): string {
  return list.length === 0 ? '[]' : `[\n${list.map(textOf).join(',\n')}\n]`;
}

/** The state file's text: the state as indented JSON, its long lists one element per line. */
export function stateText(state: SimState): string {
  const { fabric, peerStatus, ...rest } = state;
  const head = JSON.stringify(rest, null, 1);
  const lists = [
    ...(fabric ? [` "fabric": ${listText(fabric)}`] : []),
    ...(peerStatus ? [` "peerStatus": ${listText(peerStatus)}`] : []),
  ];
  if (lists.length === 0) return head;
  // `rest` always has fields (agentId...): its text ends in "\n}".
  return `${head.slice(0, -2)},\n${lists.join(',\n')}\n}`;
}

export class StateFile {
  private writing: Promise<void> | undefined;
  private dirty = false;
  /** Changes noted so far, and how many of them the file on disk holds. */
  private noted = 0;
  private written = 0;
  private readonly keptWaiters: Array<{ upTo: number; resolve: () => void }> = [];

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
    const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
    // Everything noted up to here is in what render() returns now.
    const holds = this.noted;
    const text = stateText(this.render());
    if (this.writeDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.writeDelayMs));
    // A synchronous write (before exiting) may have landed newer state meanwhile.
    if (this.written >= holds) return;
    await fs.promises.writeFile(tmp, text);
    await fs.promises.rename(tmp, file);
    this.landed(holds);
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
    fs.writeFileSync(tmp, stateText(this.render()));
    fs.renameSync(tmp, this.file);
    this.landed(holds);
  }
}
