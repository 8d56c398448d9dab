import { AckCode } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// Deliberate misbehaviour, so that the daemon's failure handling can be exercised against a real
// agent process: slow acks, negative acks, a stream dropped mid-change, a crash after a change.

export type InjectedErrorCode = 'invalid' | 'no-resources' | 'internal' | 'unsupported';

export const INJECTED_CODES: Record<InjectedErrorCode, AckCode> = {
  invalid: AckCode.ACK_CODE_INVALID,
  'no-resources': AckCode.ACK_CODE_NO_RESOURCES,
  internal: AckCode.ACK_CODE_INTERNAL,
  unsupported: AckCode.ACK_CODE_UNSUPPORTED,
};

export interface FaultOptions {
  ackLatencyMs: number;
  /** Probability (0..1) that an Upsert is refused. */
  errorRate: number;
  errorCode: InjectedErrorCode;
  /** Drop the stream instead of handling the Nth change (Upsert or Delete); 0 = never. Once per process. */
  dropStreamAfter: number;
  /** Exit the process right after acking the Nth change; 0 = never. */
  crashAfter: number;
  /** Seed of the random generator behind errorRate, for reproducible runs. */
  seed: number;
}

/** What to do with the change that was just received. */
export type ChangeVerdict = 'apply' | 'drop-stream';

export class FaultInjector {
  private changes = 0;
  private dropped = false;
  private rngState: number;

  constructor(readonly opts: FaultOptions) {
    this.rngState = opts.seed >>> 0 || 0x9e3779b9;
  }

  /** mulberry32: small, fast, and reproducible from the seed. */
  private random(): number {
    this.rngState = (this.rngState + 0x6d2b79f5) >>> 0;
    let t = this.rngState;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Counts a received change and says whether to handle it or drop the stream instead. */
  onChange(): ChangeVerdict {
    this.changes += 1;
    if (!this.dropped && this.opts.dropStreamAfter > 0 && this.changes >= this.opts.dropStreamAfter) {
      this.dropped = true;
      return 'drop-stream';
    }
    return 'apply';
  }

  /** True once the change just acked is the one after which the process must crash. */
  shouldCrash(): boolean {
    return this.opts.crashAfter > 0 && this.changes >= this.opts.crashAfter;
  }

  /**
   * Counts the changes of `items` from `from` on, to be applied together: up to the one the stream is
   * dropped instead of (`drop`, not applied), or up to and with the one after whose ack the process
   * crashes (`crash`); every change still counts as one.
   */
  takeRun<T>(items: readonly T[], from: number): { run: T[]; drop: T | undefined; crash: boolean } {
    const run: T[] = [];
    for (let i = from; i < items.length; i++) {
      const item = items[i] as T;
      if (this.onChange() === 'drop-stream') return { run, drop: item, crash: false };
      run.push(item);
      if (this.shouldCrash()) return { run, drop: undefined, crash: true };
    }
    return { run, drop: undefined, crash: false };
  }

  /** An injected refusal for an Upsert, or undefined to let it through. */
  injectedError(): { code: AckCode; message: string } | undefined {
    if (this.opts.errorRate <= 0 || this.random() >= this.opts.errorRate) return undefined;
    return {
      code: INJECTED_CODES[this.opts.errorCode],
      message: `injected ${this.opts.errorCode} failure (--error-rate ${this.opts.errorRate})`,
    };
  }

  get ackLatencyMs(): number {
    return this.opts.ackLatencyMs;
  }
}
