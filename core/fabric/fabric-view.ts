import type { ApplyLoop } from './apply-loop';
import type { FabricControllerOptions, FabricStatusOptions } from './fabric-controller-options';
import type { FabricMode, FabricReport } from '../fabric-dataplane';
import type { FabricStatus } from '../fabric-status';
import type { OwnRecord } from './own-record';
import { mergedProbes, setProbeGauges } from './peer-probes';
import { podMtu } from './pod-mtu';
import { filteredPackets, sumObjects } from './report-sums';

// The fabric as a person and the metrics see it: Status (ready or not, and why, in words), the
// warnings (MTUs above what the fabric carries, the slice book's, a disruption held by the grace) and
// the gauges set from the same reading. Its own file because it only reads the other parts (the
// node's record, the apply loop, the controller's lifecycle) and changes nothing of the fabric.

export type FabricViewOptions = Pick<
  FabricControllerOptions,
  'settings' | 'source' | 'dataplanes' | 'backends' | 'networks' | 'slices' | 'metrics'
>;

export interface FabricViewInputs {
  record: OwnRecord;
  loop: ApplyLoop;
  /** Why the dataplanes are not prepared (the controller retries). */
  prepareError(): string | undefined;
  /** Why the peer source did not start (the controller retries). */
  sourceError(): string | undefined;
}

export class FabricView {
  private readonly mode: FabricMode;
  private lastRepairs = 0;
  private lastFiltered: number | undefined;

  constructor(
    private readonly opts: FabricViewOptions,
    private readonly inputs: FabricViewInputs,
  ) {
    this.mode = opts.settings?.mode ?? 'off';
  }

  /**
   * The fabric as of now. `peers: false` leaves the per-peer rows out (readiness and `workloadnet dpus`
   * need the counts, not 5,000 rows).
   */
  status(opts: FabricStatusOptions = {}): FabricStatus {
    const { record, loop } = this.inputs;
    const mode = this.mode;
    const local = record.local;
    const reports = local && mode !== 'external' ? this.opts.dataplanes.map((d) => d.report()) : [];
    const source = mode === 'off' ? undefined : this.opts.source?.status();
    const reasons = mode === 'off' ? [] : this.reasons(reports);
    const book = mode === 'off' ? undefined : this.opts.slices;
    // As the book has them now (published within the coalescing delay).
    const endpoints = local && mode !== 'off' ? record.endpoints() : undefined;
    const lastApplyAt = loop.lastApplyAt;
    return {
      mode,
      ready: reasons.length === 0,
      reasons,
      warnings: [
        ...(local && mode !== 'off' ? this.mtuWarnings() : []),
        ...(book?.warnings ?? []),
        ...(mode === 'off' ? [] : [loop.grace.disruption()?.reason ?? ''].filter((w) => w !== '')),
        ...reports.flatMap((r) => r.warnings ?? []),
      ],
      node: record.self?.node ?? '',
      underlay: local?.underlay ?? [],
      uplink: local?.uplink ?? '',
      mtu: local?.mtu ?? 0,
      podMtu: local ? podMtu(mode, local) : 0,
      ...(local?.vtep ? { vtep: local.vtep } : {}),
      ...(endpoints ? { endpoints } : {}),
      ...(book ? { borrowed: book.borrowed, slices: book.sliceCount } : {}),
      ...(source ? { source } : {}),
      peers: opts.peers === false ? [] : loop.peerRows.view(reports, mergedProbes(this.opts.dataplanes)),
      peerCount: loop.peerRows.rows.length,
      objects: sumObjects(reports),
      repairs: reports.reduce((n, r) => n + r.repairs, 0),
      ...filteredPackets(reports),
      ...(lastApplyAt === undefined ? {} : { lastApply: new Date(lastApplyAt).toISOString() }),
    };
  }

  /** Status as of now, with the fabric's gauges set from it (repairs happen between applies). */
  observe(opts: FabricStatusOptions = {}): FabricStatus {
    const st = this.status(opts);
    if (st.mode !== 'off') this.setGauges(st);
    return st;
  }

  /** The fabric's gauges, from a reading of its status and the apply loop's rows. */
  setGauges(st: FabricStatus): void {
    const m = this.opts.metrics;
    if (!m) return;
    const { peerRows, grace } = this.inputs.loop;
    m.fabricReady.set(st.ready ? 1 : 0);
    m.fabricPeers.reset();
    for (const path of ['direct', 'vxlan', 'unreachable', 'external'] as const)
      m.fabricPeers.set({ path }, peerRows.count(path));
    m.fabricPeersWithdrawing.set(grace.pending().size);
    m.fabricRefusedClaims.reset();
    for (const [claim, n] of peerRows.refusedClaims()) m.fabricRefusedClaims.set({ claim }, n);
    setProbeGauges(m, peerRows.rows, mergedProbes(this.opts.dataplanes));
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
    const prepareError = this.inputs.prepareError();
    if (prepareError) return [prepareError];
    if (!this.inputs.record.local) return ['preparing the fabric dataplane'];
    const { applyError, lastApplyAt } = this.inputs.loop;
    const sourceError = this.inputs.sourceError();
    const out: string[] = [];
    if (sourceError) out.push(sourceError);
    if (!source) out.push('no peer source is configured');
    else if (!source.synced)
      out.push(
        `waiting for the peer source (${source.kind}) to deliver its first full list`,
        ...source.status().reasons,
      );
    else if (lastApplyAt === undefined && !applyError) out.push('applying the first peer table');
    if (applyError) out.push(applyError);
    for (const r of reports) if (!r.ready) out.push(...r.reasons);
    return out;
  }
}
