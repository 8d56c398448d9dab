import type { Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { monotonicMs } from '../../core/monotonic-clock';

// One snapshot on its way to an agent: which of its ports are still unacknowledged, which failed, and
// when the last ack came. A newer change of a port supersedes its snapshot entry (that generation will
// never be acked), so the snapshot counts as applied without it.

export class SnapshotSync {
  /** monotonicMs() when it was sent. */
  readonly startedAt = monotonicMs();
  readonly failed: string[] = [];
  readonly done: Promise<void>;
  private readonly remaining: Map<string, number>;
  private finishedAt: number | undefined;
  private resolveDone: () => void = () => undefined;

  constructor(
    readonly sessionId: string,
    readonly epoch: number,
    ports: readonly Port[],
  ) {
    this.remaining = new Map(ports.map((p) => [p.name, p.generation]));
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

  /** Counts an ack; true when it completed the snapshot. */
  ack(name: string, generation: number, ok: boolean): boolean {
    if (this.remaining.get(name) !== generation) return false;
    this.remaining.delete(name);
    if (!ok) this.failed.push(name);
    return this.remaining.size === 0 && this.finish();
  }

  /** Drops a port whose snapshot generation was replaced; true when that completed the snapshot. */
  supersede(name: string): boolean {
    return this.remaining.delete(name) && this.remaining.size === 0 && this.finish();
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
