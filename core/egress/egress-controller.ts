import { SerialRun } from '../../lib/serial-run';
import type { EgressDataplane, EgressRanges } from '../backend';
import type { Logger } from '../logger';

// Keeps each backend's egress masquerade in step with the ranges: the pod ranges of the networks that
// masquerade (a network's own ranges come and go with its pool source: a Node's podCIDRs, etcd blocks)
// and the cluster's ranges (every network's pools, the configured cluster ranges, the peers' prefixes).
// It looks at them when it starts, when told a pool came or went (the allocators' pool listeners),
// and every interval: the peers' prefixes come from the fabric's source, which it polls. A dataplane
// call is cheap when nothing changed, so the interval costs the building of two lists. The table is
// left in place at stop: pods keep their egress across a restart, and the next start adopts it
// (`workloadnet cleanup` removes it).

/** Every this many passes the tables are programmed again whatever the ranges (drift repair). */
const REFRESH_EVERY = 15;

export interface EgressTarget {
  /** The backend's name, for the log and Status. */
  backend: string;
  dataplane: EgressDataplane;
  /** Pod ranges whose traffic leaving the cluster this backend masquerades (its masquerading networks'). */
  podRanges: () => string[];
}

export interface EgressControllerOptions {
  targets: readonly EgressTarget[];
  /** Every range inside the cluster: traffic to them keeps its source. */
  clusterRanges: () => string[];
  intervalMs: number;
  log: Logger;
}

/** inversify identifier of the egress controller. */
export const EGRESS_CONTROLLER = Symbol.for('workloadnet.EgressController');

export class EgressController {
  readonly name = 'egress masquerade';
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private readonly run = new SerialRun(
    () => this.syncOnce(),
    () => this.stopped,
  );
  /** The last failure per backend, while it lasts (one log line per new failure; Status asks the backend). */
  private readonly failures = new Map<string, string>();
  /** The ranges last applied per backend, as text. */
  private readonly appliedKeys = new Map<string, string>();
  private passes = 0;
  /** Changes told (changed()) and the last of them a finished pass has looked at. */
  private told = 0;
  private seen = 0;

  constructor(private readonly opts: EgressControllerOptions) {}

  async start(): Promise<void> {
    if (this.opts.targets.length === 0) return;
    await this.run.run();
    this.timer = setInterval(() => void this.run.run(), this.opts.intervalMs).unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.timer = undefined;
    await this.run.current;
  }

  /** Looks at the ranges again now (coalesced with a look under way). */
  changed(): void {
    this.told++;
    if (this.timer) void this.run.run();
  }

  /**
   * While a change told is not yet applied, the pass that applies it; undefined when there is none.
   * An attach answered from a range that just arrived waits for it: a pod's first connection must not
   * leave before its range is masqueraded, or its conntrack entry keeps it unNATed (and its replies
   * lost) for as long as the flow lives. A failed pass counts as applied: Status reports the failure,
   * and attaches do not wait for a table that cannot be written.
   */
  inStep(): Promise<void> | undefined {
    if (this.seen === this.told || this.opts.targets.length === 0 || !this.timer) return undefined;
    return this.run.run();
  }

  private async syncOnce(): Promise<void> {
    const told = this.told;
    const cluster = this.opts.clusterRanges();
    const refresh = ++this.passes % REFRESH_EVERY === 0;
    for (const t of this.opts.targets) await this.applyTo(t, { pod: t.podRanges(), cluster }, refresh);
    this.seen = told;
  }

  /**
   * Applies `ranges` when they differ from the last applied, after a failure, or on a refresh pass
   * (which checks the dataplane against what it applied: a table removed or changed by hand comes
   * back).
   */
  private async applyTo(t: EgressTarget, ranges: EgressRanges, refresh: boolean): Promise<void> {
    // Comparing the lists as text costs far less than the dataplane's parse of thousands of prefixes.
    const key = `${ranges.pod.join(',')}|${ranges.cluster.join(',')}`;
    if (!refresh && !this.failures.has(t.backend) && this.appliedKeys.get(t.backend) === key) return;
    try {
      if (refresh) t.dataplane.invalidate();
      await t.dataplane.apply(ranges);
      this.appliedKeys.set(t.backend, key);
      if (this.failures.delete(t.backend))
        this.opts.log.info({ backend: t.backend }, 'egress masquerade programmed again');
    } catch (err) {
      const message = (err as Error).message;
      if (this.failures.get(t.backend) !== message)
        this.opts.log.error({ backend: t.backend, err: message }, 'egress masquerade not programmed');
      this.failures.set(t.backend, message);
    }
  }
}
