import type { AttachSpec, Backend, UnclaimedAttachment } from '../backend';
import { parseAttachmentKey } from '../attachment-key';
import type { AttachmentLedger } from '../attach/attachment-ledger';
import { gatewayOf, toSpec, toView } from '../attach/attachment-views';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { NetnsOpener } from '../netns-opener';
import type { NetworkSet } from '../ipam/network';
import type { AttachmentRecord } from '../store/attachment-record';
import type { Store } from '../store/store';
import type { ReconcileSummary } from '../workload-service';
import { judgeGone, uniqueNamespaces } from './sweep-guard';
import { isHostPort } from '../attach/host-port-row';
import { storeAdoption } from './agent-adoption';
import { cutShortWarning, judgeUnfinished, type UnfinishedRows } from './cut-short';

// The start-up reconcile, run once before the API serves: the store's rows are loaded (their addresses
// held, their default routes and counts restored), then the store is reconciled with each backend's
// dataplane.

export class StartupReconcile {
  /** The summary of the run, for Status. */
  last?: ReconcileSummary;

  constructor(
    private readonly ledger: AttachmentLedger,
    private readonly netns: NetnsOpener,
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {}

  private get store(): Store {
    return this.ledger.store;
  }

  private get networks(): NetworkSet {
    return this.ledger.networks;
  }

  /** Loads the rows, then reconciles. */
  async run(): Promise<ReconcileSummary> {
    const rows = this.store.all();
    // The ranges are cut among the DPUs before any stored address is held in them (slice-book.ts).
    await this.networks.slices?.load(rows);
    for (const rec of rows) this.ledger.restore(rec);
    this.networks.slices?.restoredAll();
    this.networks.restoreCursors(this.store.cursors());
    this.networks.restored();
    return this.reconcile();
  }

  /**
   * The backend removes dataplane objects of ours that have no row (including those of an attach cut
   * short by a crash before its row was written); an attach cut short after it is removed
   * (cut-short.ts). Attachments whose dataplane is missing are repaired when their namespace still
   * exists (and kept, with a warning, if the repair fails) and released when it is gone, since a
   * vanished namespace means the workload is gone too.
   */
  private async reconcile(): Promise<ReconcileSummary> {
    const started = Date.now();
    const summary: ReconcileSummary = {
      at: new Date().toISOString(),
      orphansRemoved: 0,
      adopted: 0,
      repaired: 0,
      released: 0,
      cutShort: 0,
      healthy: 0,
      warnings: [],
    };
    const rows = this.store.all();
    const { missing, adopted } = await this.reconcileBackends(rows, summary);
    if (this.store.isNew) await this.adopt(adopted, summary);
    const dataplaneMissing = new Set(missing);
    const unfinished = judgeUnfinished(rows, dataplaneMissing);
    await this.settleUnfinished(unfinished, summary);
    const cutShort = new Set(unfinished.cutShort.map((r) => r.key));
    const byKey = new Map(rows.filter((r) => !cutShort.has(r.key)).map((r) => [r.key, r]));
    const gone: AttachmentRecord[] = [];
    // Rows written before the last reboot name workloads that cannot have survived it (namespaces do
    // not), so each of them whose namespace is not there is released: that is evidence, whatever the
    // view of the namespace directory, and whatever the backend reported of its dataplane (a DPU keeps
    // its ports across the host's reboot).
    const afterReboot = this.store.rowsFromEarlierBoot;
    // The host port lives in the node's own namespace, which outlives every reboot's doubt: it is
    // neither released nor repaired here, but by its controller (core/host-port/host-port.ts).
    const hostPorts = new Set(rows.filter(isHostPort).map((r) => r.key));
    const suspects = new Set(missing.filter((k) => !hostPorts.has(k)));
    if (afterReboot) for (const r of rows) if (r.netnsPath && !hostPorts.has(r.key)) suspects.add(r.key);
    await Promise.all(
      [...suspects].map(async (key) => {
        const rec = byKey.get(key);
        if (rec && (await this.settleSuspect(rec, dataplaneMissing.has(key), afterReboot, summary)))
          gone.push(rec);
      }),
    );
    // A namespace that looks gone is evidence only through a sound view (sweep-guard.ts), the same
    // judgement as the leak sweep's. Adopted rows have no path: their missing dataplane is the evidence.
    const judged = gone.filter((r) => r.netnsPath);
    const hold =
      judged.length && !afterReboot
        ? await judgeGone(
            uniqueNamespaces(judged),
            uniqueNamespaces(rows.filter((r) => r.netnsPath && !hostPorts.has(r.key))).length,
          )
        : undefined;
    if (afterReboot && judged.length > 0)
      summary.warnings.push(
        `${judged.length} attachment(s) recorded before this boot released: their namespaces did not survive the reboot`,
      );
    if (hold)
      summary.warnings.push(
        `${judged.length} attachment(s) with their dataplane missing kept: ${hold.reason}`,
      );
    await Promise.all(
      (hold ? gone.filter((r) => !r.netnsPath) : gone).map(async (rec) => {
        await this.ledger.teardown(rec, 'reconcile: dataplane and namespace gone');
        summary.released++;
      }),
    );
    this.countOutcomes(summary);
    // Not being able to record it (a full disk) costs nothing now: the next start looks again.
    await this.store.recordReconciledBoot().catch((err: unknown) => {
      summary.warnings.push(`could not record this boot in the store: ${(err as Error).message}`);
    });
    this.last = summary;
    this.log.info({ ...summary, ms: Date.now() - started }, 'reconcile finished');
    return summary;
  }

  /**
   * Each backend reconciles the attachments it programmed, and only those: to it, another backend's
   * are not its orphans. Returns the keys whose dataplane is missing and what a new store may adopt.
   */
  private async reconcileBackends(
    rows: AttachmentRecord[],
    summary: ReconcileSummary,
  ): Promise<{ missing: string[]; adopted: AttachmentRecord[] }> {
    const missing: string[] = [];
    const adopted: AttachmentRecord[] = [];
    for (const backend of this.networks.backends()) {
      const own = rows.filter((r) => this.networks.backendOf(r) === backend);
      // The adoption record is the DPU backend's (agent-adoption.ts); other backends ignore it.
      const opts = { storeIsNew: this.store.isNew, adoption: storeAdoption(this.store) };
      const outcome = await backend.reconcile(own.map(toView), opts);
      summary.orphansRemoved += outcome.orphansRemoved.length;
      adopted.push(...this.adoptable(outcome.unclaimed ?? [], backend));
      summary.healthy += outcome.healthy.length;
      summary.warnings.push(...outcome.warnings);
      missing.push(...outcome.missing);
    }
    return { missing, adopted };
  }

  /**
   * One row whose dataplane is missing, or that was written before this boot: repaired when its
   * namespace is there and its dataplane is not, kept (with a warning) when the view of its namespace
   * is not evidence, and true when it is gone (the caller releases it, once judged).
   */
  private async settleSuspect(
    rec: AttachmentRecord,
    dataplaneMissing: boolean,
    afterReboot: boolean,
    summary: ReconcileSummary,
  ): Promise<boolean> {
    const key = rec.key;
    const presence = await this.netns.presence(rec.netnsPath, rec.netnsInode);
    if (presence === 'present') {
      if (!dataplaneMissing) return false;
      try {
        await this.repair(rec);
        summary.repaired++;
      } catch (err) {
        // The workload is still there, so its addresses stay held: releasing them could hand a
        // live workload's address to another. Check reports the drift; Detach cleans up.
        summary.warnings.push(
          `${key}: dataplane missing and repair failed (${(err as Error).message}); kept`,
        );
      }
      return false;
    }
    if (presence === 'unseen' && !afterReboot) {
      summary.warnings.push(
        `${key}: dataplane missing, and ${rec.netnsPath} shows the daemon no namespace; kept`,
      );
      return false;
    }
    return true;
  }

  /** The outcomes as the reconcile counter's increments. */
  private countOutcomes(summary: ReconcileSummary): void {
    for (const [outcomeName, n] of Object.entries({
      orphan_removed: summary.orphansRemoved,
      adopted: summary.adopted,
      repaired: summary.repaired,
      released: summary.released,
      cut_short: summary.cutShort,
      healthy: summary.healthy,
    })) {
      this.metrics.reconciled.inc({ outcome: outcomeName }, n);
    }
  }

  /**
   * The store is new, yet the dataplane holds workloads: the state was lost (a wiped disk, another
   * --state-dir), not the workloads. Deleting them as orphans would cut live workloads off and hand
   * their addresses out again, so each is recorded as it is instead: its addresses held, its host end
   * known for Detach (by workload id, as CNI DEL sends it). Its namespace path is unknown; when the
   * workload goes, its dataplane goes with it and the next start-up reconcile releases the row.
   */
  private adoptable(unclaimed: UnclaimedAttachment[], backend: Backend): AttachmentRecord[] {
    const network = this.networks.networks.find((n) => n.backend === backend) ?? this.networks.primary;
    return unclaimed.map((u) => ({
      key: u.key,
      ...parseAttachmentKey(u.key),
      netnsPath: '',
      netnsInode: 0,
      ips: u.addresses.map((address) => {
        const family = address.includes(':') ? 6 : 4;
        return { family, address, gateway: gatewayOf(family) };
      }),
      mtu: u.mtu,
      backend: backend.name,
      network: network.name,
      origin: 'adopted',
      state: 'ready',
      createdAt: new Date().toISOString(),
      dataplane: u.dataplane,
    }));
  }

  /**
   * Records every adopted workload, and that the store is no longer new, in one transaction: a start
   * killed before it commits leaves the store new, so the next start adopts them all again instead of
   * taking the ones not yet recorded for orphans (one transaction is also what makes adopting
   * thousands take milliseconds rather than one disk sync each).
   */
  private async adopt(adopted: AttachmentRecord[], summary: ReconcileSummary): Promise<void> {
    for (const record of adopted) this.ledger.holdAddresses(record);
    await this.store.recordFirstReconcile(adopted, this.networks.cursors());
    for (const record of adopted) this.ledger.added(record);
    summary.adopted += adopted.length;
    if (adopted.length === 0) return;
    const message =
      `the store at ${this.store.dir} is new, but the dataplane holds ${adopted.length} workload(s) ` +
      'it does not know: adopted them (their addresses are held; Detach removes them) instead of deleting ' +
      'them as orphans. If the state was lost, see "A lost state store" in docs/troubleshooting.md';
    summary.warnings.push(message);
    this.log.error({ adopted: adopted.map((u) => u.key) }, message);
  }

  /**
   * Removes the attaches cut short (cut-short.ts): dataplane, addresses and row, whatever their
   * namespace shows; and drops the mark of those whose dataplane is all there.
   */
  private async settleUnfinished(rows: UnfinishedRows, summary: ReconcileSummary): Promise<void> {
    await Promise.all(
      rows.cutShort.map(async (rec) => {
        await this.ledger.teardown(rec, 'reconcile: attach cut short');
        summary.cutShort++;
      }),
    );
    if (rows.cutShort.length > 0) {
      const warning = cutShortWarning(rows.cutShort);
      summary.warnings.push(warning);
      this.log.warn({ attachments: rows.cutShort.map((r) => r.key) }, warning);
    }
    // Not being able to write it costs nothing now: the next start judges the row again.
    await Promise.all(
      rows.finished.map((rec) => this.store.markFinished(rec.key, rec.createdAt).catch(() => undefined)),
    );
  }

  /** Programs a recorded attachment's dataplane again, in the namespace it was recorded in. */
  private async repair(rec: AttachmentRecord): Promise<void> {
    const netns = await this.netns.openWorkload(rec.netnsPath);
    try {
      if (netns.inode !== rec.netnsInode) throw new Error(`${rec.netnsPath} now names another namespace`);
      const spec: AttachSpec = { ...toSpec(rec), netns };
      const backend = this.networks.backendOf(rec);
      // The recorded plan again: the repaired interface keeps its MAC, so peers' neighbour caches hold.
      const dataplane = await backend.attach(spec, rec.dataplane ?? backend.plan(spec));
      await this.store.put({ ...rec, dataplane });
    } finally {
      netns.close();
    }
  }
}
