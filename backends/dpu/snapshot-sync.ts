import { ObjectKind } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { monotonicMs } from '../../lib/monotonic-clock';

// One snapshot on its way to an agent: which of its objects (ports, and from version 3 fabric objects)
// are still unacknowledged, which failed, and when the last ack came. A newer change of an object
// supersedes its snapshot entry (that generation will never be acked), so the snapshot counts as
// applied without it. A name is unique within its kind only, so entries are keyed by both.

/** One object a snapshot lists. */
export interface Listed {
  name: string;
  generation: number;
}

const key = (kind: ObjectKind, name: string): string =>
  kind === ObjectKind.OBJECT_KIND_PORT ? `p:${name}` : `f:${name}`;

/** A snapshot of the ports alone, the whole snapshot to follow (agent-sync.ts says when). */
export interface SnapshotOptions {
  /** It lists the ports only: the whole snapshot, fabric objects included, follows it. */
  fabricFollows?: boolean;
  /** The keep_unlisted it was sent with: the snapshot that follows says the same. */
  keepUnlisted?: boolean;
  /** When the sync it continues began (its duration counts from there). */
  startedAt?: number;
}

export class SnapshotSync {
  /** monotonicMs() when it (or the snapshot of the ports it follows) was sent. */
  readonly startedAt: number;
  readonly fabricFollows: boolean;
  readonly keepUnlisted: boolean;
  readonly failed: string[] = [];
  readonly done: Promise<void>;
  private readonly remaining: Map<string, number>;
  private finishedAt: number | undefined;
  private resolveDone: () => void = () => undefined;

  constructor(
    readonly sessionId: string,
    readonly epoch: number,
    ports: readonly Listed[],
    fabric: readonly Listed[] = [],
    o: SnapshotOptions = {},
  ) {
    this.startedAt = o.startedAt ?? monotonicMs();
    this.fabricFollows = o.fabricFollows ?? false;
    this.keepUnlisted = o.keepUnlisted ?? false;
    this.remaining = new Map([
      ...ports.map((p): [string, number] => [key(ObjectKind.OBJECT_KIND_PORT, p.name), p.generation]),
      ...fabric.map((f): [string, number] => [key(ObjectKind.OBJECT_KIND_FABRIC, f.name), f.generation]),
    ]);
    this.done = new Promise<void>((resolve) => (this.resolveDone = resolve));
    if (this.remaining.size === 0) this.finish();
  }

  get complete(): boolean {
    return this.finishedAt !== undefined;
  }

  /** Milliseconds from sending to the last ack, once complete. */
  get durationMs(): number | undefined {
    return this.finishedAt === undefined ? undefined : this.finishedAt - this.startedAt;
  }

  /** Whether the snapshot still waits for this generation of the object. */
  awaits(name: string, generation: number, kind = ObjectKind.OBJECT_KIND_PORT): boolean {
    return this.remaining.get(key(kind, name)) === generation;
  }

  /** Counts an ack; true when it completed the snapshot. `failed` lists ports only (they warn). */
  ack(name: string, generation: number, ok: boolean, kind = ObjectKind.OBJECT_KIND_PORT): boolean {
    const k = key(kind, name);
    if (this.remaining.get(k) !== generation) return false;
    this.remaining.delete(k);
    if (!ok && kind === ObjectKind.OBJECT_KIND_PORT) this.failed.push(name);
    return this.remaining.size === 0 && this.finish();
  }

  /** Drops an object whose snapshot generation was replaced; true when that completed the snapshot. */
  supersede(name: string, kind = ObjectKind.OBJECT_KIND_PORT): boolean {
    return this.remaining.delete(key(kind, name)) && this.remaining.size === 0 && this.finish();
  }

  /** The session ended: nobody should wait for this snapshot any more. */
  abandon(): void {
    this.resolveDone();
  }

  private finish(): boolean {
    if (this.finishedAt !== undefined) return false;
    this.finishedAt = monotonicMs();
    this.resolveDone();
    return true;
  }
}
