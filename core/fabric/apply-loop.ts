import { SerialRun } from '../../lib/serial-run';
import { asWorkloadNetError } from '../errors';
import { monotonicMs } from '../../lib/monotonic-clock';
import { ApplyPacer } from './apply-pacer';
import type { FabricControllerOptions } from './fabric-controller-options';
import type { FabricReport } from '../fabric-dataplane';
import type { OwnKeys } from './own-keys';
import type { OwnRecord } from './own-record';
import { mergedProbes, neverAnswered } from './peer-probes';
import { PeerRows } from './peer-rows';
import type { Peer, PeerSource } from '../peer-source';
import { externalReport } from './report-sums';
import { WithdrawalGrace } from './withdrawal-grace';

// The fabric's apply loop: the peer source's table, with the peers that left within the withdrawal
// grace still in it, taken to the dataplanes. Every change (of the table, of this node's record or
// slices, of a withdrawing peer's probes) schedules an apply, coalesced and paced (apply-pacer.ts),
// one at a time; nothing is applied before the source has a full list, since before it a missing
// peer is only a peer not yet listed. A periodic apply catches what a dataplane's own repair missed.
// Its own file because it is the one part of the controller that writes to the dataplanes, and the
// one that owns timers of its own.

export type ApplyLoopOptions = Pick<
  FabricControllerOptions,
  | 'settings'
  | 'source'
  | 'dataplanes'
  | 'slices'
  | 'withdrawGraceMs'
  | 'appliedPeers'
  | 'log'
  | 'metrics'
  | 'now'
  | 'coalesceMs'
  | 'reapplyMs'
  | 'applyShare'
  | 'rangesCheckMs'
>;

export interface ApplyLoopHooks {
  /** Whether the controller was stopped: nothing is scheduled or applied then. */
  stopped(): boolean;
  /** An apply finished (the fabric's gauges are set from it). */
  applied(): void;
}

export class ApplyLoop {
  /** The peers that left the source, kept for the grace (or withdrawn early, on evidence). */
  readonly grace: WithdrawalGrace;
  /** Each applied peer as the last apply left it. */
  readonly peerRows: PeerRows;
  private readonly now: () => number;
  private readonly pacer: ApplyPacer;
  private coalesce?: NodeJS.Timeout;
  private expiry?: NodeJS.Timeout;
  private periodic?: NodeJS.Timeout;
  private rangesCheck?: NodeJS.Timeout;
  /** The ranges the last apply gave the dataplanes (sorted, joined). */
  private appliedRanges?: string;
  /** One apply at a time; a change during one is applied right after it. */
  private readonly applies = new SerialRun(
    () => this.pacer.time(() => this.applyOnce()),
    () => this.hooks.stopped(),
  );
  private following = false;
  private error?: string;
  private lastAt?: number;

  constructor(
    private readonly opts: ApplyLoopOptions,
    private readonly record: OwnRecord,
    private readonly keys: OwnKeys,
    private readonly hooks: ApplyLoopHooks,
  ) {
    this.now = opts.now ?? monotonicMs;
    this.grace = new WithdrawalGrace({ graceMs: opts.withdrawGraceMs }, this.now);
    this.peerRows = new PeerRows({ graceMs: opts.withdrawGraceMs, now: this.now });
    this.pacer = new ApplyPacer({ share: opts.applyShare });
    if (opts.appliedPeers) this.grace.seed(opts.appliedPeers.load());
  }

  /** Why the last apply failed; undefined once one succeeds. */
  get applyError(): string | undefined {
    return this.error;
  }

  /** When the last apply finished (wall clock, ms); undefined before the first. */
  get lastApplyAt(): number | undefined {
    return this.lastAt;
  }

  /** Starts the periodic apply, and the look for a change of the ranges the gateway keys come from. */
  start(): void {
    this.periodic = setInterval(() => this.schedule(), this.opts.reapplyMs ?? 60_000);
    this.periodic.unref();
    if (this.keys.followed) {
      // A range added or gone may move this node's gateway keys; the pools have no second listener.
      this.rangesCheck = setInterval(() => {
        if (this.appliedRanges !== undefined && this.keys.fingerprint() !== this.appliedRanges)
          this.schedule();
      }, this.opts.rangesCheckMs ?? 2000);
      this.rangesCheck.unref();
    }
  }

  /** A withdrawing peer whose probes now fail (or never answered) goes at the next apply, not after the grace. */
  follow(): void {
    if (this.following) return;
    this.following = true;
    for (const dp of this.opts.dataplanes)
      dp.onProbeChange?.((node) => {
        if (this.grace.pending().has(node) || this.grace.keptPrefixes(node)) this.schedule();
      });
  }

  /** Ends the timers, waits for the apply in progress and keeps the last applied table on disk. */
  async stop(): Promise<void> {
    for (const t of [this.coalesce, this.expiry]) clearTimeout(t);
    clearInterval(this.periodic);
    clearInterval(this.rangesCheck);
    this.coalesce = this.expiry = this.periodic = this.rangesCheck = undefined;
    await this.applies.current;
    this.opts.appliedPeers?.flush();
  }

  /** Applies the table now rather than after the coalescing delay. */
  async applyNow(): Promise<void> {
    clearTimeout(this.coalesce);
    this.coalesce = undefined;
    await this.applies.run();
  }

  /** An apply after the coalescing delay (paced), unless one is already due. */
  schedule(): void {
    if (this.hooks.stopped() || this.coalesce) return;
    this.coalesce = setTimeout(
      () => {
        this.coalesce = undefined;
        void this.applies.run();
      },
      this.pacer.delay(this.opts.coalesceMs ?? 5),
    );
    this.coalesce.unref();
  }

  private async applyOnce(): Promise<void> {
    await this.record.publishIfChanged();
    const source = this.opts.source;
    if (this.hooks.stopped() || !this.record.local || !source?.synced) return;
    if (this.opts.slices && !this.opts.slices.ready) return;
    const own = this.record.ownForApply();
    const ranges = this.keys.fingerprint();
    const table = this.table(source);
    const metrics = this.opts.metrics;
    let reports: FabricReport[] = [];
    if (this.opts.settings?.mode === 'external') {
      // Routes come from elsewhere (BGP, the cloud); this node only publishes and reports.
      reports = [externalReport(table)];
    } else {
      try {
        for (const dp of this.opts.dataplanes) reports.push(await dp.apply(table, own));
        this.error = undefined;
      } catch (err) {
        this.error = `applying the peer table failed: ${asWorkloadNetError(err).message}`;
        this.opts.log.error({ err: this.error, peers: table.length }, 'fabric apply failed');
        metrics?.fabricApplies.inc({ result: 'error' });
        this.scheduleExpiry();
        return;
      }
    }
    this.lastAt = Date.now();
    this.appliedRanges = ranges;
    this.opts.appliedPeers?.save(table);
    this.peerRows.update(table, reports, this.grace.pending(), (node) => this.grace.keptPrefixes(node));
    // One kept by the grace that this apply found unreachable (refused a claim) goes at the next.
    for (const node of this.grace.pending().keys())
      if (this.peerRows.pathOf(node) === 'unreachable') {
        this.schedule();
        break;
      }
    metrics?.fabricApplies.inc({ result: reports.every((r) => r.ready) ? 'ok' : 'not_ready' });
    this.hooks.applied();
    this.scheduleExpiry();
  }

  /** The source's peers with those within the grace, less those withdrawn early on evidence (said in the log). */
  private table(source: PeerSource): Peer[] {
    const probes = mergedProbes(this.opts.dataplanes);
    const table = this.grace.table(source.peers(), {
      failing: (node) => probes.get(node)?.state === 'degraded',
      unproven: (node) => this.peerRows.pathOf(node) === 'unreachable' || neverAnswered(probes.get(node)),
    });
    const early = this.grace.withdrawnEarly();
    if (early.length > 0)
      this.opts.log.warn(
        { peers: early },
        'peers withdrawn before the grace: they left the peer source and fail their data-path probes',
      );
    const unproven = this.grace.withdrawnUnproven();
    if (unproven.length > 0)
      this.opts.log.warn(
        { peers: unproven },
        'peers withdrawn at once: they left the peer source and never proved themselves (no path, or no probe answered)',
      );
    return table;
  }

  /** An apply when the oldest withdrawal falls due, so it is removed on time, not at the next change. */
  private scheduleExpiry(): void {
    clearTimeout(this.expiry);
    this.expiry = undefined;
    const due = this.grace.nextDue();
    if (due === undefined || this.hooks.stopped()) return;
    this.expiry = setTimeout(() => this.schedule(), Math.max(0, due - this.now()));
    this.expiry.unref();
  }
}
