import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Endpoint, Inventory, Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { VfSlot } from './vf-pool';

// The simulator's state, written as JSON for tests and operators to read. Each write goes to a
// temporary file that is then renamed over the old one, so a reader never sees half a file. Writes are
// coalesced: a burst of changes (a 5,000-port snapshot) costs a few rewrites, not one per port, and the
// file always ends up showing the latest state.

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

export class StateFile {
  private writing: Promise<void> | undefined;
  private dirty = false;

  constructor(
    private readonly file: string | undefined,
    private readonly render: () => SimState,
  ) {}

  /** Notes a change; the file is rewritten soon, with whatever the state is by then. */
  changed(): void {
    if (!this.file) return;
    this.dirty = true;
    this.writing ??= this.drain();
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
    await fs.promises.writeFile(tmp, JSON.stringify(this.render(), null, 1));
    await fs.promises.rename(tmp, file);
  }

  /** Waits until everything noted so far is on disk. */
  async flush(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /** Writes the current state right now, synchronously (before exiting). */
  writeNow(): void {
    if (!this.file) return;
    const tmp = path.join(path.dirname(this.file), `.${path.basename(this.file)}.${process.pid}.sync.tmp`);
    fs.writeFileSync(tmp, JSON.stringify(this.render(), null, 1));
    fs.renameSync(tmp, this.file);
  }
}
