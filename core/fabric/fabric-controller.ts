import { SerialRun } from '../../lib/serial-run';
import { asWorkloadNetError } from '../errors';
import type { SliceBook } from '../ipam/slice-book';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import { monotonicMs } from '../monotonic-clock';
import type {
  FabricDataplane,
  FabricMode,
  FabricReport,
  FabricSettings,
  LocalNode,
  OwnPrefixes,
} from './fabric-dataplane';
import type { FabricStatus } from './fabric-status';
import type { NodeRecord, PeerSource, TunnelEndpoint } from './peer-source';
import { OwnKeys, type TunnelAddressesNow } from './own-keys';
import { podMtu, type FabricPodMtu } from './pod-mtu';
import type { AppliedPeersFile } from './applied-peers-file';
import { WithdrawalGrace } from './withdrawal-grace';
import { mergedProbes, neverAnswered, setProbeGauges } from './peer-probes';
import { ApplyPacer } from './apply-pacer';
import { externalReport, filteredPackets, sumObjects } from './report-sums';
import { PeerRows } from './peer-rows';

// The fabric's control loop: the peer source's table, taken to the backends' dataplanes. It finds
// this node's underlay (prepare), publishes this node's record, and on every change of the table
// (coalesced) applies it — only once the source has a full list, since before it a missing peer is
// only a peer not yet listed — with the peers that left within the withdrawal grace still in it.
// A periodic apply catches what a dataplane's own repair missed. Start-up never waits for the source:
// the node serves its own pods meanwhile, and Status says the fabric is not ready and why.
//
// With DPUs (a slice book, core/ipam/slice-book.ts): the node's record lists its DPUs as endpoints,
// each with its prefixes (its slices and what it borrowed); a dataplane telling of a DPU come or gone
// gets the newcomer a slice, and that, a borrow or a borrowed address released republishes the record
// and applies again, coalesced like peer changes (never on the attach path). Nothing is published or
// applied from the book before it holds the stored cut and attachments: an empty book would tell the
// peers and the DPUs that this node's DPUs own nothing.

export interface FabricControllerOptions {
  /** What the dataplanes are prepared with; absent: the fabric is off. */
  settings?: FabricSettings;
  nodeName: string;
  bootId: string;
  /** Where peers come from; absent when the mode is off. */
  source?: PeerSource;
  /** The dataplanes of the backends in use that offer one (the Linux backend's). */
  dataplanes: readonly FabricDataplane[];
  /** Names of the backends in use, for the reason when none offers a fabric. */
  backends: readonly string[];
  withdrawGraceMs: number;
  /**
   * Where the last applied table is kept for the next start: peers it lists that the source no longer
   * does then get the withdrawal grace instead of losing their routes at the first apply.
   */
  appliedPeers?: AppliedPeersFile;
  /** Told what each dataplane's node carries, for the networks whose MTU is auto. */
  podMtu?: FabricPodMtu;
  /**
   * The networks whose backend offers the fabric: a configured MTU (0 = auto) above what the fabric
   * carries, and attachments running with one, are warned of.
   */
  networks?: readonly FabricNetwork[];
  /** How the node's ranges are cut among its DPUs, when a backend in use places ports. */
  slices?: SliceBook;
  /**
   * The ranges this node's gateway keys come from (OwnPrefixes.keyRanges): what its peer source
   * announces for it, when no pod gets their first address.
   */
  keyRanges?: () => string[];
  /** This node's tunnel addresses, the keys in place of keyRanges' (own-keys.ts), when it has some. */
  tunnelAddresses?: TunnelAddressesNow;
  /** How often they are looked at for a change (a range added), ms. */
  rangesCheckMs?: number;
  log: Logger;
  metrics?: Metrics;
  /** Monotonic clock (ms) of the withdrawal grace; tests move it by hand. */
  now?: () => number;
  /**
   * Changes of the table within this long are applied once (ms). Short: a burst that comes while an
   * apply runs is applied once after it anyway (one apply at a time).
   */
  coalesceMs?: number;
  /** Period of the full apply (ms). */
  reapplyMs?: number;
  /** Share of the time applies may take when changes keep coming (apply-pacer.ts; default 0.1). */
  applyShare?: number;
  /** Wait before preparing again after prepare failed, or starting the source again (ms). */
  retryMs?: number;
}

/** A network as the MTU warnings see it (core/ipam/network.ts). */
export interface FabricNetwork {
  name: string;
  config: { mtu: number };
  /** What the fabric carries to its pods; undefined before its dataplane is prepared. */
  carried(): number | undefined;
  /** Its live attachments with a larger MTU than the fabric carries to them. */
  aboveFabric(): number;
}

export interface FabricStatusOptions {
  /** The per-peer rows (default true). */
  peers?: boolean;
}

/** inversify identifier of the FabricController. */
export const FABRIC_CONTROLLER = Symbol.for('workloadnet.FabricController');

/** A part of the daemon's lifecycle (core/daemon/lifecycle.ts), started after the backends and pool sources. */
export class FabricController {
  readonly name = 'fabric';
  private readonly grace: WithdrawalGrace;
  private readonly keys: OwnKeys;
  private readonly now: () => number;
  private local?: LocalNode;
  /** Each dataplane's node as it last said (the first one's underlay and VTEP are the node's). */
  private locals: LocalNode[] = [];
  private self?: NodeRecord;
  /** The record the source was last given (JSON), so that only a changed one is published again. */
  private published?: string;
  private sourceStarted = false;
  private localListening = false;
  /** The slices of the DPUs last listed being given and recorded (the record waits for it). */
  private localWork: Promise<void> = Promise.resolve();
  private prepareError?: string;
  private sourceError?: string;
  private listening = false;
  private stopped = true;
  private coalesce?: NodeJS.Timeout;
  private expiry?: NodeJS.Timeout;
  private periodic?: NodeJS.Timeout;
  private rangesCheck?: NodeJS.Timeout;
  /** The ranges the last apply gave the dataplanes (sorted, joined). */
  private appliedRanges?: string;
  private retry?: NodeJS.Timeout;
  /** One apply at a time; a change during one is applied right after it. */
  private readonly applies = new SerialRun(
    () => this.pacer.time(() => this.applyOnce()),
    () => this.stopped,
  );
  private applyError?: string;
  private lastApplyAt?: number;
  private lastRepairs = 0;
  private lastFiltered: number | undefined;
  private readonly peerRows: PeerRows;
  private readonly pacer: ApplyPacer;

  constructor(private readonly opts: FabricControllerOptions) {
    this.keys = new OwnKeys(opts.keyRanges, opts.tunnelAddresses);
    this.now = opts.now ?? monotonicMs;
    this.grace = new WithdrawalGrace({ graceMs: opts.withdrawGraceMs }, this.now);
    this.peerRows = new PeerRows({ graceMs: opts.withdrawGraceMs, now: this.now });
    this.pacer = new ApplyPacer({ share: opts.applyShare });
    if (opts.appliedPeers) this.grace.seed(opts.appliedPeers.load());
  }

  get mode(): FabricMode {
    return this.opts.settings?.mode ?? 'off';
  }

  async start(): Promise<void> {
    if (!this.opts.settings) return;
    this.stopped = false;
    if (this.opts.dataplanes.length === 0) return;
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
    await this.bringUp();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of [this.coalesce, this.expiry, this.retry]) clearTimeout(t);
    clearInterval(this.periodic);
    clearInterval(this.rangesCheck);
    this.coalesce = this.expiry = this.retry = this.periodic = this.rangesCheck = undefined;
    await this.applies.current;
    this.opts.appliedPeers?.flush();
    // Not waiting for a start that has not finished: a source that cannot reach its store may never
    // finish starting; stopping it ends that.
    if (this.self) await this.opts.source?.stop();
    // The kernel state stays: pods keep reaching their peers while the daemon is away.
    if (this.local) for (const dp of this.opts.dataplanes) await dp.stop();
  }

  /** Applies the table now rather than after the coalescing delay (tests, and the periodic apply). */
  async applyNow(): Promise<void> {
    clearTimeout(this.coalesce);
    this.coalesce = undefined;
    await this.applies.run();
  }

  /**
   * The fabric as of now. `peers: false` leaves the per-peer rows out (readiness and `workloadnet dpus`
   * need the counts, not 5,000 rows).
   */
  status(opts: FabricStatusOptions = {}): FabricStatus {
    const mode = this.mode;
    const local = this.local;
    const reports = this.local && mode !== 'external' ? this.opts.dataplanes.map((d) => d.report()) : [];
    const source = mode === 'off' ? undefined : this.opts.source?.status();
    const reasons = mode === 'off' ? [] : this.reasons(reports);
    const book = mode === 'off' ? undefined : this.opts.slices;
    // As the book has them now (published within the coalescing delay).
    const endpoints = local && mode !== 'off' ? this.endpoints() : undefined;
    return {
      mode,
      ready: reasons.length === 0,
      reasons,
      warnings: [
        ...(local && mode !== 'off' ? this.mtuWarnings() : []),
        ...(book?.warnings ?? []),
        ...(mode === 'off' ? [] : [this.grace.disruption()?.reason ?? ''].filter((w) => w !== '')),
        ...reports.flatMap((r) => r.warnings ?? []),
      ],
      node: this.self?.node ?? '',
      underlay: local?.underlay ?? [],
      uplink: local?.uplink ?? '',
      mtu: local?.mtu ?? 0,
      podMtu: local ? podMtu(mode, local) : 0,
      ...(local?.vtep ? { vtep: local.vtep } : {}),
      ...(endpoints ? { endpoints } : {}),
      ...(book ? { borrowed: book.borrowed, slices: book.sliceCount } : {}),
      ...(source ? { source } : {}),
      peers: opts.peers === false ? [] : this.peerRows.view(reports, mergedProbes(this.opts.dataplanes)),
      peerCount: this.peerRows.rows.length,
      objects: sumObjects(reports),
      repairs: reports.reduce((n, r) => n + r.repairs, 0),
      ...filteredPackets(reports),
      ...(this.lastApplyAt === undefined ? {} : { lastApply: new Date(this.lastApplyAt).toISOString() }),
    };
  }

  /**
   * A pod MTU above what the fabric carries does not stop the node: its pods talk to each other, and
   * to other nodes with small packets; large ones are dropped or fragmented on the way. So it is said,
   * not made a reason.
   */
  private mtuWarnings(): string[] {
    const out: string[] = [];
    for (const n of this.opts.networks ?? []) {
      const fits = n.carried();
      if (fits === undefined) continue;
      if (n.config.mtu > fits)
        out.push(
          `network ${n.name}: mtu ${n.config.mtu} is larger than the ${this.mode} fabric carries (${fits}); set its mtu to ${fits} or less, or to 0 (auto)`,
        );
      // An interface keeps the MTU it was attached with: one attached before the uplink's MTU or the
      // mode changed (or with a call's own MTU) still sends what the fabric now drops.
      const above = n.aboveFabric();
      if (above > 0)
        out.push(
          `network ${n.name}: ${above} attachment(s) run with a larger MTU than the ${this.mode} fabric carries (${fits}); their large packets to other nodes are dropped until they are attached again`,
        );
    }
    return out;
  }

  private reasons(reports: FabricReport[]): string[] {
    const source = this.opts.source;
    if (this.opts.dataplanes.length === 0)
      return [
        `no backend in use offers a fabric (${this.opts.backends.join(', ') || 'none'}); set fabric.mode to "off"`,
      ];
    if (this.prepareError) return [this.prepareError];
    if (!this.local) return ['preparing the fabric dataplane'];
    const out: string[] = [];
    if (this.sourceError) out.push(this.sourceError);
    if (!source) out.push('no peer source is configured');
    else if (!source.synced)
      out.push(
        `waiting for the peer source (${source.kind}) to deliver its first full list`,
        ...source.status().reasons,
      );
    else if (this.lastApplyAt === undefined && !this.applyError) out.push('applying the first peer table');
    if (this.applyError) out.push(this.applyError);
    for (const r of reports) if (!r.ready) out.push(...r.reasons);
    return out;
  }

  /** Prepares the dataplanes and starts the source; retried while prepare fails. */
  private async bringUp(): Promise<void> {
    const { settings, log } = this.opts;
    if (!settings) return;
    try {
      let first: LocalNode | undefined;
      const locals: LocalNode[] = [];
      for (const dp of this.opts.dataplanes) {
        // The VTEP MAC is derived from the node's name too only where the source publishes it (etcd
        // records, Kubernetes annotations): a peers file lists each node's MAC by hand, and a MAC that
        // changed at an upgrade would cut the node off until every file was edited.
        const nodeName = this.opts.source?.kind === 'static' ? undefined : this.opts.nodeName;
        const local = await dp.prepare({ ...settings, ...(nodeName !== undefined ? { nodeName } : {}) });
        first ??= local;
        locals.push(local);
      }
      this.local = first;
      this.locals = locals;
      this.prepareError = undefined;
      this.opts.dataplanes.forEach((dp, i) => this.opts.podMtu?.learn(dp, locals[i] as LocalNode));
    } catch (err) {
      const msg = `fabric dataplane not prepared: ${asWorkloadNetError(err).message}`;
      if (msg !== this.prepareError) log.error({ err: msg }, 'fabric not prepared; retrying');
      this.prepareError = msg;
      this.retryLater(() => this.bringUp());
      return;
    }
    const local = this.local;
    if (!local) return;
    this.self = this.record();
    log.info(
      { mode: settings.mode, node: this.self.node, underlay: local.underlay, uplink: local.uplink },
      'fabric prepared',
    );
    this.followLocal();
    this.startSource();
  }

  /** This node's record: the first dataplane's underlay and VTEP, every dataplane's DPUs with their prefixes. */
  private record(): NodeRecord {
    const local = this.local as LocalNode;
    const endpoints = this.endpoints();
    return {
      node: this.opts.nodeName,
      underlay: local.underlay,
      mtu: local.mtu,
      ...(local.vtep ? { vtep: this.keys.vtep(local.vtep) } : {}),
      bootId: this.opts.bootId,
      ...(endpoints ? { endpoints } : {}),
    };
  }

  /** The node's DPUs, each with its prefixes from the slice book (or as its dataplane gave them). */
  private endpoints(): TunnelEndpoint[] | undefined {
    const listed = this.locals.flatMap((l) => l.endpoints ?? []);
    if (listed.length === 0 && !this.locals.some((l) => l.endpoints)) return undefined;
    const own = this.own();
    return listed.map((e) => ({ ...e, prefixes: own ? [...(own.byEndpoint.get(e.id) ?? [])] : e.prefixes }));
  }

  /** What the dataplanes are told this node owns; undefined without a book, or before it is whole. */
  private own(): OwnPrefixes | undefined {
    const book = this.opts.slices;
    return book?.ready ? book.own() : undefined;
  }

  /**
   * What the dataplanes are told this node owns: the book's cut (when there is one) and where its
   * gateway keys come from. Undefined while the book is not whole, or when neither is known.
   */
  private ownForApply(): OwnPrefixes | undefined {
    const book = this.opts.slices;
    if (book && !book.ready) return undefined;
    return this.keys.withKeys(book?.own());
  }

  /** Listens to the dataplanes' DPUs coming and going, and to the book's changes. */
  private followLocal(): void {
    if (this.localListening) return;
    this.localListening = true;
    this.opts.slices?.onChange(() => this.schedule());
    // A withdrawing peer whose probes now fail (or never answered) goes at the next apply, not after the grace.
    for (const dp of this.opts.dataplanes)
      dp.onProbeChange?.((node) => {
        if (this.grace.pending().has(node) || this.grace.keptPrefixes(node)) this.schedule();
      });
    this.opts.dataplanes.forEach((dp, i) =>
      dp.onLocalChange?.((local) => {
        this.locals[i] = local;
        this.opts.podMtu?.learn(dp, local);
        if (i === 0) this.local = local;
        this.localChanged();
      }),
    );
    // DPUs the dataplanes already knew at prepare() get their slices too; and the book learns which
    // places are endpoints at all (none yet, on a node whose DPUs do not carry the fabric).
    this.localChanged();
  }

  private localChanged(): void {
    this.localWork = this.localWork.then(() => this.giveSlices());
  }

  /** The DPUs changed: newcomers get slices (once the book is whole), then the record and table follow. */
  private async giveSlices(): Promise<void> {
    const book = this.opts.slices;
    if (book) {
      try {
        await book.setPresent(this.locals.flatMap((l) => (l.endpoints ?? []).map((e) => e.id)));
      } catch (err) {
        this.opts.log.error(
          { err: asWorkloadNetError(err).message },
          'cannot record the slices of new DPUs; they are kept in memory and recorded with the next change',
        );
      }
    }
    this.schedule();
  }

  /** Publishes this node's record again when it changed since the source was last given it. */
  private async publishIfChanged(): Promise<void> {
    const source = this.opts.source;
    if (!this.local || !source || !this.sourceStarted) return;
    if (this.opts.slices && !this.opts.slices.ready) return;
    const self = this.record();
    const text = JSON.stringify(self);
    this.self = self;
    if (text === this.published || !source.update) return;
    try {
      await source.update(self);
      this.published = text;
    } catch (err) {
      // Published again at the next change or periodic apply.
      this.opts.log.error({ err: asWorkloadNetError(err).message }, 'cannot publish this node record');
    }
  }

  private startSource(): void {
    const source = this.opts.source;
    const self = this.self;
    if (!source || !self || this.stopped) return;
    if (!this.listening) {
      source.onChange(() => this.schedule());
      this.listening = true;
    }
    // Not awaited by start(): a source that cannot reach its store keeps trying on its own, and the
    // node serves its pods meanwhile. With DPUs, the record waits for the whole slice book (a record
    // without its DPUs' slices would withdraw their routes from every peer).
    const book = this.opts.slices;
    const whole = book && !book.ready ? book.loaded : Promise.resolve();
    void whole
      .then(() => this.localWork)
      .then(() => {
        if (this.stopped) return;
        const current = this.record();
        this.self = current;
        this.published = JSON.stringify(current);
        return source.start(current);
      })
      .then(
        () => {
          this.sourceStarted = true;
          this.sourceError = undefined;
          this.schedule();
        },
        (err: unknown) => {
          if (this.stopped) return;
          this.sourceError = `peer source ${source.kind} did not start: ${asWorkloadNetError(err).message}`;
          this.opts.log.error({ err: this.sourceError }, 'peer source did not start; retrying');
          this.retryLater(() => this.startSource());
        },
      );
  }

  private retryLater(fn: () => unknown): void {
    if (this.stopped) return;
    this.retry = setTimeout(() => void fn(), this.opts.retryMs ?? 10_000);
    this.retry.unref();
  }

  private schedule(): void {
    if (this.stopped || this.coalesce) return;
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
    await this.publishIfChanged();
    const source = this.opts.source;
    if (this.stopped || !this.local || !source?.synced) return;
    if (this.opts.slices && !this.opts.slices.ready) return;
    const own = this.ownForApply();
    const ranges = this.keys.fingerprint();
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
    const metrics = this.opts.metrics;
    let reports: FabricReport[] = [];
    if (this.mode === 'external') {
      // Routes come from elsewhere (BGP, the cloud); this node only publishes and reports.
      reports = [externalReport(table)];
    } else {
      try {
        for (const dp of this.opts.dataplanes) reports.push(await dp.apply(table, own));
        this.applyError = undefined;
      } catch (err) {
        this.applyError = `applying the peer table failed: ${asWorkloadNetError(err).message}`;
        this.opts.log.error({ err: this.applyError, peers: table.length }, 'fabric apply failed');
        metrics?.fabricApplies.inc({ result: 'error' });
        this.scheduleExpiry();
        return;
      }
    }
    this.lastApplyAt = Date.now();
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
    this.setGauges(this.status({ peers: false }));
    this.scheduleExpiry();
  }

  /** An apply when the oldest withdrawal falls due, so it is removed on time, not at the next change. */
  private scheduleExpiry(): void {
    clearTimeout(this.expiry);
    this.expiry = undefined;
    const due = this.grace.nextDue();
    if (due === undefined || this.stopped) return;
    this.expiry = setTimeout(() => this.schedule(), Math.max(0, due - this.now()));
    this.expiry.unref();
  }

  /** Status as of now, with the fabric's gauges set from it (repairs happen between applies). */
  observe(opts: FabricStatusOptions = {}): FabricStatus {
    const st = this.status(opts);
    if (st.mode !== 'off') this.setGauges(st);
    return st;
  }

  private setGauges(st: FabricStatus): void {
    const m = this.opts.metrics;
    if (!m) return;
    m.fabricReady.set(st.ready ? 1 : 0);
    m.fabricPeers.reset();
    for (const path of ['direct', 'vxlan', 'unreachable', 'external'] as const)
      m.fabricPeers.set({ path }, this.peerRows.count(path));
    m.fabricPeersWithdrawing.set(this.grace.pending().size);
    m.fabricRefusedClaims.reset();
    for (const [claim, n] of this.peerRows.refusedClaims()) m.fabricRefusedClaims.set({ claim }, n);
    setProbeGauges(m, this.peerRows.rows, mergedProbes(this.opts.dataplanes));
    if (st.borrowed !== undefined) m.fabricBorrowed.set(st.borrowed);
    for (const [kind, n] of Object.entries(st.objects)) m.fabricObjects.set({ kind }, n);
    // The dataplanes count repairs since they started; the counter takes what is new.
    if (st.repairs > this.lastRepairs) m.fabricRepairs.inc(st.repairs - this.lastRepairs);
    this.lastRepairs = st.repairs;
    // The kernel's counter outlives the daemon: the first value seen is counted whole, then what is
    // new; a counter that went back (its table was made anew) counts from zero again.
    if (st.filteredPackets !== undefined) {
      const seen = this.lastFiltered;
      const add =
        seen === undefined || st.filteredPackets < seen ? st.filteredPackets : st.filteredPackets - seen;
      if (add > 0) m.fabricFilteredPackets.inc(add);
      this.lastFiltered = st.filteredPackets;
    }
  }
}
