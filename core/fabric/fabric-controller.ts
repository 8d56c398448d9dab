import { asWorkloadNetError } from '../errors';
import { ApplyLoop } from './apply-loop';
import type { FabricControllerOptions, FabricStatusOptions } from './fabric-controller-options';
import type { FabricMode, LocalNode } from '../fabric-dataplane';
import type { FabricStatus } from '../fabric-status';
import { FabricView } from './fabric-view';
import { OwnKeys } from './own-keys';
import { OwnRecord } from './own-record';

export type {
  FabricControllerOptions,
  FabricNetwork,
  FabricStatusOptions,
} from './fabric-controller-options';

// The fabric's control loop: the peer source's table, taken to the backends' dataplanes. It finds
// this node's underlay (prepare), publishes this node's record, and on every change of the table
// applies it. Start-up never waits for the source: the node serves its own pods meanwhile, and Status
// says the fabric is not ready and why.
//
// This file is the lifecycle (prepare, start the source, retry either while it fails, stop) and puts
// the parts together, each in its own file with only the options it reads:
// - own-record.ts: this node as published (its record, its DPUs and their slices, what it owns);
// - apply-loop.ts: the table taken to the dataplanes (coalesced, paced, the withdrawal grace);
// - fabric-view.ts: Status, its reasons and warnings, and the gauges.

/** inversify identifier of the FabricController. */
export const FABRIC_CONTROLLER = Symbol.for('workloadnet.FabricController');

/** A part of the daemon's lifecycle (core/lifecycle.ts), started after the backends and pool sources. */
export class FabricController {
  readonly name = 'fabric';
  private readonly record: OwnRecord;
  private readonly loop: ApplyLoop;
  private readonly view: FabricView;
  private prepareError?: string;
  private sourceError?: string;
  private listening = false;
  private stopped = true;
  private retry?: NodeJS.Timeout;
  /** A start of the source that failed waits here for its retry. */
  private sourceRetry?: NodeJS.Timeout;

  constructor(private readonly opts: FabricControllerOptions) {
    const keys = new OwnKeys(opts.keyRanges, opts.tunnelAddresses);
    const stopped = (): boolean => this.stopped;
    this.record = new OwnRecord(opts, keys, { changed: () => this.recordChanged(), stopped });
    this.loop = new ApplyLoop(opts, this.record, keys, {
      stopped,
      applied: () => this.view.setGauges(this.view.status({ peers: false })),
    });
    this.view = new FabricView(opts, {
      record: this.record,
      loop: this.loop,
      prepareError: () => this.prepareError,
      sourceError: () => this.sourceError,
    });
  }

  get mode(): FabricMode {
    return this.opts.settings?.mode ?? 'off';
  }

  async start(): Promise<void> {
    if (!this.opts.settings) return;
    this.stopped = false;
    if (this.opts.dataplanes.length === 0) return;
    this.loop.start();
    await this.bringUp();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    this.retry = undefined;
    clearTimeout(this.sourceRetry);
    this.sourceRetry = undefined;
    await this.loop.stop();
    // Not waiting for a start that has not finished: a source that cannot reach its store may never
    // finish starting; stopping it ends that.
    if (this.record.self) await this.opts.source?.stop();
    // The kernel state stays: pods keep reaching their peers while the daemon is away.
    if (this.record.local) for (const dp of this.opts.dataplanes) await dp.stop();
  }

  /** Applies the table now rather than after the coalescing delay (tests, and the periodic apply). */
  async applyNow(): Promise<void> {
    await this.loop.applyNow();
  }

  /**
   * The fabric as of now. `peers: false` leaves the per-peer rows out (readiness and `workloadnet dpus`
   * need the counts, not 5,000 rows).
   */
  status(opts: FabricStatusOptions = {}): FabricStatus {
    return this.view.status(opts);
  }

  /** Status as of now, with the fabric's gauges set from it (repairs happen between applies). */
  observe(opts: FabricStatusOptions = {}): FabricStatus {
    return this.view.observe(opts);
  }

  /** Prepares the dataplanes and starts the source; retried while prepare fails. */
  private async bringUp(): Promise<void> {
    const { settings, log } = this.opts;
    if (!settings) return;
    try {
      const locals: LocalNode[] = [];
      for (const dp of this.opts.dataplanes) {
        // The VTEP MAC is derived from the node's name too only where the source publishes it (etcd
        // records, Kubernetes annotations): a peers file lists each node's MAC by hand, and a MAC that
        // changed at an upgrade would cut the node off until every file was edited.
        const nodeName = this.opts.source?.kind === 'static' ? undefined : this.opts.nodeName;
        locals.push(await dp.prepare({ ...settings, ...(nodeName !== undefined ? { nodeName } : {}) }));
      }
      this.record.prepared(locals);
      this.prepareError = undefined;
    } catch (err) {
      const msg = `fabric dataplane not prepared: ${asWorkloadNetError(err).message}`;
      if (msg !== this.prepareError) log.error({ err: msg }, 'fabric not prepared; retrying');
      this.prepareError = msg;
      this.retryLater(() => this.bringUp());
      return;
    }
    const local = this.record.local;
    if (!local) return;
    const self = this.record.refresh();
    log.info(
      { mode: settings.mode, node: self.node, underlay: local.underlay, uplink: local.uplink },
      'fabric prepared',
    );
    this.record.follow();
    this.loop.follow();
    this.startSource();
  }

  /**
   * Not awaited by start(): a source that cannot reach its store keeps trying on its own, and the node
   * serves its pods meanwhile.
   */
  private startSource(): void {
    const source = this.opts.source;
    if (!source || !this.record.self || this.stopped) return;
    if (!this.listening) {
      source.onChange(() => this.loop.schedule());
      this.listening = true;
    }
    void this.record.startSource(source).then(
      () => {
        this.sourceError = undefined;
        this.loop.schedule();
      },
      (err: unknown) => {
        if (this.stopped) return;
        this.sourceError = `peer source ${source.kind} did not start: ${asWorkloadNetError(err).message}`;
        this.opts.log.error({ err: this.sourceError }, 'peer source did not start; retrying');
        this.sourceRetry = this.later(() => {
          this.sourceRetry = undefined;
          this.startSource();
        });
      },
    );
  }

  /**
   * This node's record changed (a DPU came, the underlay was found): applied, and a source that refused
   * the last record is given this one now rather than at its retry. After a restart a node reached
   * only through its DPUs has no underlay until they reconnect; waiting out the retry would keep its
   * peers from routing to it that much longer.
   */
  private recordChanged(): void {
    this.loop.schedule();
    if (this.sourceRetry === undefined || this.stopped) return;
    clearTimeout(this.sourceRetry);
    this.sourceRetry = undefined;
    this.startSource();
  }

  private retryLater(fn: () => unknown): void {
    this.retry = this.later(fn);
  }

  private later(fn: () => unknown): NodeJS.Timeout | undefined {
    if (this.stopped) return undefined;
    const t = setTimeout(() => void fn(), this.opts.retryMs ?? 10_000);
    t.unref();
    return t;
  }
}
