import * as fs from 'node:fs';
import * as path from 'node:path';
import { WorkloadNetError } from '../errors';
import type { Logger } from '../logger';

// Whether the state store can be written. A full or read-only state disk must fail the call that
// writes, with a code the caller can act on, and leave the daemon serving: the store remembers since
// when its writes fail (Status reports it) and, while they do, probes with a tiny write so that it
// notices by itself when the disk has room again.

export type WriteHealth =
  | { ok: true }
  | {
      ok: false;
      /** ISO time of the first failed write of this episode. */
      since: string;
      /** One sentence: what fails and why. */
      reason: string;
      code: WorkloadNetError['code'];
    };

/** Below this much free space, a short write or EIO from LMDB is taken for a full disk. */
const NEARLY_FULL_BYTES = 1024 * 1024;

/** lmdb's error for a map that cannot grow further. */
const MDB_MAP_FULL = -30792;

export class StoreWriteHealth {
  private failure?: { since: Date; error: WorkloadNetError };
  private probeTimer?: NodeJS.Timeout;

  constructor(
    /** The data file, named in every message. */
    private readonly file: string,
    /** One small durable write; used to find out when writes work again. */
    private readonly probe: () => Promise<void>,
    private readonly log?: Logger,
    private readonly probeIntervalMs = 2000,
  ) {}

  get current(): WriteHealth {
    const f = this.failure;
    if (!f) return { ok: true };
    return { ok: false, since: f.since.toISOString(), reason: f.error.message, code: f.error.code };
  }

  /**
   * Runs one write. A failure of the disk beneath the store becomes a WorkloadNetError naming the store
   * (RESOURCE_EXHAUSTED when it is full, UNAVAILABLE otherwise); any other error passes unchanged.
   */
  async run<T>(write: () => Promise<T>): Promise<T> {
    let result: T;
    try {
      result = await write();
    } catch (err) {
      const diskError = await this.diskError(err);
      if (!diskError) throw err;
      this.failed(diskError);
      throw diskError;
    }
    this.succeeded();
    return result;
  }

  stop(): void {
    clearInterval(this.probeTimer);
    this.probeTimer = undefined;
  }

  private failed(error: WorkloadNetError): void {
    if (!this.failure) {
      this.failure = { since: new Date(), error };
      this.log?.error({ store: this.file, err: error.message }, 'state store writes are failing');
      this.probeTimer = setInterval(
        () => void this.run(this.probe).catch(() => undefined),
        this.probeIntervalMs,
      );
      this.probeTimer.unref();
    } else {
      this.failure.error = error;
    }
  }

  private succeeded(): void {
    if (!this.failure) return;
    const since = this.failure.since;
    this.failure = undefined;
    this.stop();
    this.log?.warn(
      { store: this.file, failedForMs: Date.now() - since.getTime() },
      'state store writes succeed again',
    );
  }

  /** The WorkloadNetError for a failed commit, or undefined when `err` is not about the disk. */
  private async diskError(err: unknown): Promise<WorkloadNetError | undefined> {
    const cause = await commitCause(err);
    if (!cause) return undefined;
    const errno = errnoName(cause);
    const what = `the state store ${this.file} cannot be written`;
    if (errno === 'ENOSPC' || errno === 'EDQUOT' || (errno === 'EIO' && this.nearlyFull())) {
      return new WorkloadNetError(
        'RESOURCE_EXHAUSTED',
        `${what}: its filesystem is full (${errno}); free space under ${path.dirname(this.file)} and the daemon recovers by itself`,
        true,
      );
    }
    if (errno === 'MDB_MAP_FULL') {
      return new WorkloadNetError(
        'RESOURCE_EXHAUSTED',
        `${what}: its memory map is full (MDB_MAP_FULL); remove attachments or move the store to a bigger map`,
        true,
      );
    }
    if (errno === 'EROFS')
      return new WorkloadNetError(
        'UNAVAILABLE',
        `${what}: its filesystem is read-only (EROFS); remount ${path.dirname(this.file)} read-write`,
        true,
      );
    return new WorkloadNetError(
      'UNAVAILABLE',
      `${what}: ${errno ? `${errno}: ` : ''}${cause.message}; check the disk beneath ${path.dirname(this.file)}`,
      true,
    );
  }

  private nearlyFull(): boolean {
    try {
      const st = fs.statfsSync(path.dirname(this.file));
      return st.bavail * st.bsize < NEARLY_FULL_BYTES;
    } catch {
      return false;
    }
  }
}

/**
 * The error beneath a failed lmdb commit. lmdb rejects the transaction with a generic "Commit failed"
 * whose `commitError` promise rejects with the system error (errno in `code`) right after; a write
 * that throws a system error directly (a synchronous transaction) carries it itself. Errors thrown by
 * our own transaction code carry neither and are not disk errors.
 */
async function commitCause(err: unknown): Promise<Error | undefined> {
  if (!(err instanceof Error)) return undefined;
  const pending = (err as { commitError?: Promise<unknown> }).commitError;
  if (pending && typeof pending.then === 'function') {
    const settled = await Promise.race([
      pending.then(
        () => undefined,
        (e: unknown) => e,
      ),
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 1000).unref()),
    ]);
    return settled instanceof Error ? settled : err;
  }
  return errnoName(err) ? err : undefined;
}

const ERRNO_NAMES: Record<number, string> = {
  5: 'EIO',
  13: 'EACCES',
  28: 'ENOSPC',
  30: 'EROFS',
  122: 'EDQUOT',
  [MDB_MAP_FULL]: 'MDB_MAP_FULL',
};

function errnoName(err: Error): string | undefined {
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'number') return ERRNO_NAMES[code] ?? `errno ${code}`;
  if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return code;
  if (/MDB_MAP_FULL/.test(err.message)) return 'MDB_MAP_FULL';
  return undefined;
}
