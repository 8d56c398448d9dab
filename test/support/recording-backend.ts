import type {
  AttachmentView,
  AttachSpec,
  Backend,
  BackendHealth,
  CheckScope,
  DataplaneResult,
  Drift,
  ReconcileOutcome,
} from '../../core/backend';
import { WorkloadNetError } from '../../core/errors';

/**
 * A test-only backend that programs nothing and records what it was asked, so API tests can assert on
 * the core's behaviour (rollback, idempotency, concurrency) without a kernel. Failure and delay are
 * switched on per test. Like the Linux backend it plans its result, so the core writes the row while
 * attach() runs.
 */
export class RecordingBackend implements Backend {
  readonly name = 'recording';
  readonly programmed = new Map<string, AttachSpec>();
  readonly calls: Array<{ op: string; key: string }> = [];
  /** When set, attach fails with this error (after recording the call). */
  failAttach?: WorkloadNetError | Error;
  /** When set, detach fails with this error (the core must still release addresses). */
  failDetach?: Error;
  attachDelayMs = 0;
  healthy = true;
  maxConcurrent = 0;
  private running = 0;

  async start(): Promise<void> {}
  async stop(): Promise<void> {}

  /** Plans made so far; each gets its own MAC and host interface name, as a real backend's would. */
  plans = 0;

  plan(spec: AttachSpec): DataplaneResult {
    this.plans++;
    const n = this.plans;
    return {
      ifName: spec.ifName,
      mac: `02:00:00:00:00:${(n % 256).toString(16).padStart(2, '0')}`,
      mtu: spec.mtu,
      hostIfName: `rec${n}`,
      routes: [{ destination: '0.0.0.0/0', gateway: '169.254.1.1' }],
    };
  }

  async attach(spec: AttachSpec, planned: DataplaneResult): Promise<DataplaneResult> {
    this.calls.push({ op: 'attach', key: spec.key });
    this.running++;
    this.maxConcurrent = Math.max(this.maxConcurrent, this.running);
    try {
      if (this.attachDelayMs) await new Promise((r) => setTimeout(r, this.attachDelayMs));
      if (this.failAttach) throw this.failAttach;
      this.programmed.set(spec.key, spec);
      return this.report ? this.report(planned) : planned;
    } finally {
      this.running--;
    }
  }

  /**
   * When set, attach reports this instead of the plan, like a backend that learns something while
   * programming (an agent's endpoint); the core must then record what was reported.
   */
  report?: (planned: DataplaneResult) => DataplaneResult;

  async detach(att: AttachmentView): Promise<void> {
    this.calls.push({ op: 'detach', key: att.key });
    if (this.failDetach) throw this.failDetach;
    this.programmed.delete(att.key);
  }

  /** Drift that check() reports per key, as a backend that found an attachment's dataplane changed. */
  readonly drift = new Map<string, Drift[]>();

  /** The scope of each check() asked, by key. */
  readonly checks: Array<{ key: string; scope: CheckScope }> = [];

  async check(att: AttachmentView, scope: CheckScope = 'full'): Promise<Drift[]> {
    this.checks.push({ key: att.key, scope });
    const found = this.drift.get(att.key);
    if (found) return found;
    return this.programmed.has(att.key)
      ? []
      : [{ kind: 'interface-missing', message: `${att.key} is not programmed` }];
  }

  async reconcile(atts: AttachmentView[]): Promise<ReconcileOutcome> {
    const wanted = new Set(atts.map((a) => a.key));
    const orphans = [...this.programmed.keys()].filter((k) => !wanted.has(k));
    for (const k of orphans) this.programmed.delete(k);
    return {
      orphansRemoved: orphans,
      missing: atts.filter((a) => !this.programmed.has(a.key)).map((a) => a.key),
      healthy: atts.filter((a) => this.programmed.has(a.key)).map((a) => a.key),
      warnings: [],
    };
  }

  async health(): Promise<BackendHealth> {
    return this.healthy
      ? { ready: true, reasons: [] }
      : { ready: false, reasons: ['recording backend set unhealthy'] };
  }
}
