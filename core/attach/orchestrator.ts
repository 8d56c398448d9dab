import { randomUUID } from 'node:crypto';
import { inject, injectable } from 'inversify';
import { Admission } from './admission';
import {
  type AttachmentView,
  type AttachSpec,
  type Backend,
  type BackendHealth,
  type DataplaneResult,
  type Drift,
  type IpAssignment,
  type UnclaimedAttachment,
} from '../backend';
import { CONFIG, DEFAULT_NETWORK, type DaemonConfig } from '../config';
import { alreadyExists, asWorkloadNetError, notFound, unavailable } from '../errors';
import type { AllocatedIp } from '../ipam/ip-allocator';
import { KeyedMutex } from './keyed-mutex';
import { LeakSweep, type SweepResult } from '../reconcile/leak-sweep';
import { LOGGER, type Logger } from '../logger';
import { METRICS, Metrics } from '../metrics';
import type { Netns } from '../../lib/netns/netns-handle';
import { NETNS_OPENER, type NetnsOpener } from '../netns-opener';
import { NETWORKS, type Network, type NetworkSet } from '../ipam/network';
import { STORE, Store, type AttachmentRecord } from '../store/store';
import { judgeGone, uniqueNamespaces } from '../reconcile/sweep-guard';
import {
  DEFAULT_IF_NAME,
  attachmentKey,
  validateAttach,
  validateIfName,
  validateWorkloadId,
  validateNetworkName,
  type AttachRequest,
} from './validation';
import type {
  AttachCall,
  Attachment,
  DetachCall,
  GcResult,
  NetworkStatus,
  PoolUsage,
  ReconcileSummary,
  ServiceStatus,
  WorkloadService,
} from '../workload-service';

/** The orchestrator itself; WORKLOAD_SERVICE is what is served (the orchestrator behind a gate). */
export const ORCHESTRATOR = Symbol.for('workloadnet.Orchestrator');

/**
 * Attaches that open their namespace and program at once; more wait in order (up to maxInFlight, past
 * which calls are refused). Enough to keep a threadpool and an agent stream busy.
 */
const ATTACH_CONCURRENCY = 32;

/** The link-local gateways of the routed model: the node side answers for them on every host link. */
export const GATEWAY_V4 = '169.254.1.1';
export const GATEWAY_V6 = 'fe80::1';

/**
 * Attach, Detach and the start-up reconcile. Attach reads top-down like a CNI plugin's cmdAdd:
 * validate, open the namespace, lock the workload, allocate (its undo right below), plan, program and
 * record, answer. Admission and metrics wrap it; they do not split it.
 */
@injectable()
export class Orchestrator implements WorkloadService {
  private readonly locks = new KeyedMutex();
  private readonly admission: Admission;
  /** Detaches are neither refused nor bounded here, only paced (see admission.ts). */
  private readonly detachPace = new Admission(Number.POSITIVE_INFINITY, Number.MAX_SAFE_INTEGER);
  /** Keys whose row is written while their dataplane is still being programmed: not shown yet. */
  private readonly programming = new Set<string>();
  /** Attaches in flight, each settled once it has answered or rolled back (shutdown waits for them). */
  private readonly attaching = new Set<Promise<unknown>>();
  /** Attaches that shutdown cancelled while their backend programmed: it removed their rows already. */
  private readonly cancelled = new Set<string>();
  private stopping = false;
  private lastReconcile?: ReconcileSummary;
  /**
   * The attachment that carries each namespace's default routes, by the namespace's inode: one per
   * namespace, or a second interface's default route would clash with the first (EEXIST). Rebuilt from
   * the store at start-up; an entry goes when its attachment goes.
   */
  private readonly defaultRouteHolders = new Map<number, string>();
  /** Attachments per network name, kept as rows come and go (Status reads it every 2 s: no scan). */
  private readonly perNetwork = new Map<string, number>();
  /** Releases attachments whose namespace is gone (see leak-sweep.ts). */
  readonly sweeper: LeakSweep;

  constructor(
    @inject(NETWORKS) private readonly networks: NetworkSet,
    @inject(STORE) private readonly store: Store,
    @inject(NETNS_OPENER) private readonly netns: NetnsOpener,
    @inject(CONFIG) private readonly config: DaemonConfig,
    @inject(LOGGER) private readonly log: Logger,
    @inject(METRICS) private readonly metrics: Metrics,
  ) {
    this.admission = new Admission(config.maxInFlight, ATTACH_CONCURRENCY);
    this.sweeper = new LeakSweep(
      {
        rows: () => this.store.rows(),
        release: (rec, why) =>
          this.locks.run(rec.workloadId, async () => {
            const current = this.store.get(rec.key);
            // Detached, or attached again, since the sweep looked: not the attachment it saw.
            if (current?.createdAt !== rec.createdAt) return false;
            await this.teardown(current, why);
            return true;
          }),
      },
      netns,
      config.sweepIntervalMs,
      log.child({ part: 'sweep' }),
      { released: () => metrics.sweepReleased.inc(), held: (hold) => metrics.setSweepHeld(hold?.kind) },
    );
  }

  attach(call: AttachCall): Promise<Attachment> {
    const label = { backend: this.networks.primary.backend.name };
    return this.metered('attach', label, () => {
      // The network first: its MTU is the default, and an unknown one is refused before anything.
      const network = this.networks.get(validateNetworkName(call.network));
      label.backend = network.backend.name;
      const req = validateAttach({ ...call, network: network.name }, network.config.mtu);
      return this.admission.run(() => this.tracked(this.attachWorkload(req, network)));
    });
  }

  /** Counts an attach as in flight until it has answered or rolled back (see drain). */
  private tracked<T>(attach: Promise<T>): Promise<T> {
    const settled = attach.then(
      () => undefined,
      () => undefined,
    );
    this.attaching.add(settled);
    void settled.then(() => this.attaching.delete(settled));
    return attach;
  }

  /**
   * Called on shutdown before the store closes. Attaches in flight get up to `boundMs` to answer or
   * roll back; an attach still waiting on its backend after that (an agent that never acks) is
   * cancelled: its row is removed now, while the store is open, so that the next start does not take
   * it for a live attachment whose dataplane went missing and re-program a port its caller was told
   * failed. What the backend programmed for it is undone when the backend answers, or removed as an
   * orphan by the next start-up reconcile.
   */
  async drain(boundMs: number): Promise<void> {
    this.stopping = true;
    if (this.attaching.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(this.attaching),
        new Promise((resolve) => (timer = setTimeout(resolve, boundMs))),
      ]);
      clearTimeout(timer);
    }
    const left = [...this.programming];
    if (left.length === 0) return;
    for (const key of left) this.cancelled.add(key);
    await this.store.removeAll(left);
    this.log.warn(
      { attachments: left },
      'shutdown: attaches still waiting on their backend were cancelled and their rows removed',
    );
  }

  /**
   * One attachment, from a validated request to its recorded result. Every failure leaves nothing
   * behind: the backend undoes its own steps, programAndRecord removes the row, and the addresses go
   * back to the pool right where they were taken.
   */
  private async attachWorkload(req: AttachRequest, network: Network): Promise<Attachment> {
    // The fields every line of this call carries, passed with each line: a pino child per call cost
    // more of the event loop than the attach's own planning (burst profiles, docs/benchmarks.md), and a
    // call logs one line.
    const ctx = {
      workloadId: req.workloadId,
      ifName: req.ifName,
      network: req.network,
      requestId: randomUUID(),
    };
    const backend = network.backend;
    const netns = await this.netns.openWorkload(req.netnsPath);
    try {
      return await this.locks.run(req.workloadId, async () => {
        const existing = this.store.get(req.key);
        if (existing) return sameAttachment(existing, req, netns);

        const allocated = await network.pools.allocate();
        try {
          const defaultRoute =
            network.config.defaultRoute && (await this.claimDefaultRoute(netns.inode, req));
          const routes = defaultRoute ? undefined : network.ranges();
          const record = newRecord(req, netns, allocated, backend.name, defaultRoute, routes);
          const spec: AttachSpec = { ...toSpec(record), netns, dpu: req.dpu, dpuPort: req.dpuPort };
          record.dataplane = backend.plan(spec);
          await this.programAndRecord(record, spec, network);
          this.counted(record, 1);
          this.log.info(
            { ...ctx, ips: record.ips.map((i) => i.address), hostIf: record.dataplane.hostIfName },
            'attached',
          );
          return record;
        } catch (err) {
          // A row that could not be removed keeps its addresses: they follow the row (see reconcile).
          if (!this.rowLeft(req.key)) {
            network.allocator.release(allocated.map((a) => a.address));
            this.dropDefaultRoute(netns.inode, req.key);
          } else this.counted({ network: req.network }, 1);
          this.log.warn({ ...ctx, err: (err as Error).message }, 'attach failed; rolled back');
          throw err;
        }
      });
    } finally {
      netns.close();
    }
  }

  /**
   * Whether a new attachment in this namespace carries its default routes: yes unless another
   * attachment there already does. A holder whose namespace is gone (its inode reused by a new one) is
   * forgotten. Claimed before programming, so two workloads sharing a namespace never both claim it.
   */
  private async claimDefaultRoute(inode: number, req: AttachRequest): Promise<boolean> {
    const holder = this.defaultRouteHolders.get(inode);
    if (holder !== undefined && holder !== req.key) {
      const rec = this.store.get(holder);
      // Without a row the holder is an attach still being programmed: it holds the route.
      if (!rec || (await this.netns.stillPresent(rec.netnsPath, rec.netnsInode))) return false;
      if (this.defaultRouteHolders.get(inode) !== holder) return false;
    }
    this.defaultRouteHolders.set(inode, req.key);
    return true;
  }

  private counted(rec: { network?: string }, delta: 1 | -1): void {
    const name = rec.network || DEFAULT_NETWORK;
    this.perNetwork.set(name, (this.perNetwork.get(name) ?? 0) + delta);
  }

  private dropDefaultRoute(inode: number, key: string): void {
    if (this.defaultRouteHolders.get(inode) === key) this.defaultRouteHolders.delete(inode);
  }

  /**
   * The one way an attachment is recorded. The row, with the planned dataplane, is written in one
   * durable transaction while the backend programs, and stays hidden from List and Get until both are
   * done. If the backend reports more than it planned (an agent's endpoint), the row is updated before
   * the answer. A crash in between leaves a row whose dataplane reconcile finds missing (repaired while
   * the namespace exists, released when it is gone), or a dataplane without a row, which carries the
   * attachment's name and is removed as an orphan.
   */
  private async programAndRecord(
    record: AttachmentRecord,
    spec: AttachSpec,
    network: Network,
  ): Promise<void> {
    const planned = record.dataplane as DataplaneResult;
    if (this.stopping) throw unavailable('the daemon is shutting down; retry once it is back');
    this.programming.add(record.key);
    try {
      const [programmed, stored] = await Promise.allSettled([
        network.backend.attach(spec, planned),
        this.store.put(record, this.networks.cursors()),
      ]);
      if (this.cancelled.has(record.key)) {
        // Shutdown removed the row and the caller has gone: whatever the backend did is undone.
        await this.undoProgramming(record);
        throw unavailable('the attach was cancelled by the daemon shutting down; retry once it is back');
      }
      let failure: unknown =
        programmed.status === 'rejected' ? programmed.reason : (stored as PromiseRejectedResult).reason;
      if (programmed.status === 'fulfilled' && stored.status === 'fulfilled') {
        if (sameDataplane(programmed.value, planned)) return;
        record.dataplane = programmed.value;
        try {
          await this.store.put(record);
          return;
        } catch (err) {
          failure = err;
        }
      }
      // Detach is tolerant: after a failed attach (which undid its own steps) it only makes sure.
      await this.undoProgramming(record);
      if (stored.status === 'fulfilled') await this.removeRow(record);
      throw failure;
    } finally {
      this.programming.delete(record.key);
    }
  }

  /** Whether a failed attach left its row behind (shutdown removes a cancelled one's itself). */
  private rowLeft(key: string): boolean {
    if (this.cancelled.has(key)) return false;
    try {
      return this.store.get(key) !== undefined;
    } catch {
      // The store closed under a call that outlived the shutdown: keep its addresses held.
      return true;
    }
  }

  /** Takes down whatever of a failed attach's dataplane is left. */
  private async undoProgramming(rec: AttachmentRecord): Promise<void> {
    try {
      await this.networks.backendOf(rec).detach(toView(rec));
    } catch (err) {
      this.log.warn(
        { workloadId: rec.workloadId, ifName: rec.ifName, err: (err as Error).message },
        'rollback teardown failed; reconcile removes leftovers',
      );
    }
  }

  private async removeRow(rec: AttachmentRecord): Promise<void> {
    try {
      await this.store.remove(rec.key);
    } catch (err) {
      // The row stays, so its addresses stay held too; reconcile settles it at the next start.
      this.log.error(
        { workloadId: rec.workloadId, err: (err as Error).message },
        'cannot remove the row of a failed attach; its addresses stay held',
      );
    }
  }

  detach(call: DetachCall): Promise<void> {
    return this.metered('detach', { backend: this.networks.primary.backend.name }, async () => {
      const workloadId = validateWorkloadId(call.workloadId);
      const ifName = call.ifName ? validateIfName(call.ifName) : undefined;
      const ctx = { workloadId, ifName, requestId: randomUUID() };
      await this.detachPace.run(() =>
        this.locks.run(workloadId, async () => {
          const records = ifName
            ? [this.store.get(attachmentKey(workloadId, ifName))].filter(isDefined)
            : this.store.byWorkload(workloadId);
          for (const rec of records) await this.teardown(rec, 'detach');
          this.log.info(
            { ...ctx, detached: records.length },
            records.length ? 'detached' : 'detach of unknown workload: nothing to do',
          );
        }),
      );
    });
  }

  /**
   * Removes an attachment's dataplane, then its addresses and row. The addresses are released even when
   * the dataplane step fails: a leaked address is worse than a leftover link, which reconcile removes.
   */
  private async teardown(rec: AttachmentRecord, why: string): Promise<void> {
    try {
      await this.networks.backendOf(rec).detach(toView(rec));
    } catch (err) {
      this.log.warn(
        { workloadId: rec.workloadId, ifName: rec.ifName, why, err: (err as Error).message },
        'dataplane teardown failed; releasing addresses anyway',
      );
    }
    await this.store.remove(rec.key);
    this.counted(rec, -1);
    this.networks.of(rec)?.allocator.release(rec.ips.map((i) => i.address));
    this.dropDefaultRoute(rec.netnsInode, rec.key);
  }

  /** Runs one API operation and records its latency and result code. */
  private async metered<T>(op: string, label: { backend: string }, fn: () => Promise<T>): Promise<T> {
    const start = process.hrtime.bigint();
    let code = 'OK';
    try {
      return await fn();
    } catch (err) {
      code = asWorkloadNetError(err).code;
      throw err;
    } finally {
      this.metrics.observe(op, label.backend, code, Number(process.hrtime.bigint() - start) / 1e9);
    }
  }

  /**
   * Loads allocations from the store and reconciles the store with the backend. Called once before the
   * API starts serving.
   */
  async init(): Promise<ReconcileSummary> {
    for (const rec of this.store.all()) {
      this.counted(rec, 1);
      for (const ip of rec.ips) this.restoreAllocation(rec, ip);
      if (rec.defaultRoute !== false && rec.netnsInode) this.defaultRouteHolders.set(rec.netnsInode, rec.key);
    }
    this.networks.restoreCursors(this.store.cursors());
    this.sweeper.knownSinceStart(this.store.rows());
    return this.reconcile();
  }

  private restoreAllocation(rec: AttachmentRecord, ip: IpAssignment): void {
    const network = this.networks.of(rec);
    if (!network) {
      // Its network was removed from the config: the attachment keeps working and can be detached.
      this.log.warn(
        { workloadId: rec.workloadId, network: rec.network, address: ip.address },
        'attachment of a network this node no longer serves',
      );
      return;
    }
    try {
      network.allocator.markUsed(ip.address);
    } catch (err) {
      // The pool was reconfigured and no longer contains this address: the attachment keeps it (the
      // workload is using it) but it can never be handed out again, which is what we want.
      this.log.warn(
        { workloadId: rec.workloadId, address: ip.address, err: (err as Error).message },
        'address outside the configured pools',
      );
    }
  }

  /**
   * Start-up reconcile. The backend removes dataplane objects of ours that have no row (including those
   * of an attach cut short by a crash). Attachments whose dataplane is missing are repaired when their
   * namespace still exists (and kept, with a warning, if the repair fails) and released when it is
   * gone, since a vanished namespace means the workload is gone too.
   */
  private async reconcile(): Promise<ReconcileSummary> {
    const started = Date.now();
    const summary: ReconcileSummary = {
      at: new Date().toISOString(),
      orphansRemoved: 0,
      adopted: 0,
      repaired: 0,
      released: 0,
      healthy: 0,
      warnings: [],
    };
    const rows = this.store.all();
    // Each backend reconciles the attachments it programmed, and only those: to it, another backend's
    // are not its orphans.
    const missing: string[] = [];
    const adopted: AttachmentRecord[] = [];
    for (const backend of this.networks.backends()) {
      const own = rows.filter((r) => this.networks.backendOf(r) === backend);
      const outcome = await backend.reconcile(own.map(toView), { storeIsNew: this.store.isNew });
      summary.orphansRemoved += outcome.orphansRemoved.length;
      adopted.push(...this.adoptable(outcome.unclaimed ?? [], backend));
      summary.healthy += outcome.healthy.length;
      summary.warnings.push(...outcome.warnings);
      missing.push(...outcome.missing);
    }
    if (this.store.isNew) await this.adopt(adopted, summary);
    const byKey = new Map(rows.map((r) => [r.key, r]));
    const gone: AttachmentRecord[] = [];
    // Rows written before the last reboot name workloads that cannot have survived it (namespaces do
    // not), so each of them whose namespace is not there is released: that is evidence, whatever the
    // view of the namespace directory, and whatever the backend reported of its dataplane (a DPU keeps
    // its ports across the host's reboot).
    const afterReboot = this.store.rowsFromEarlierBoot;
    const suspects = new Set(missing);
    if (afterReboot) for (const r of rows) if (r.netnsPath) suspects.add(r.key);
    const dataplaneMissing = new Set(missing);
    await Promise.all(
      [...suspects].map(async (key) => {
        const rec = byKey.get(key);
        if (!rec) return;
        const presence = await this.netns.presence(rec.netnsPath, rec.netnsInode);
        if (presence === 'present') {
          if (!dataplaneMissing.has(key)) return;
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
          return;
        }
        if (presence === 'unseen' && !afterReboot) {
          summary.warnings.push(
            `${key}: dataplane missing, and ${rec.netnsPath} shows the daemon no namespace; kept`,
          );
          return;
        }
        gone.push(rec);
      }),
    );
    // A namespace that looks gone is evidence only through a sound view (sweep-guard.ts), the same
    // judgement as the leak sweep's. Adopted rows have no path: their missing dataplane is the evidence.
    const judged = gone.filter((r) => r.netnsPath);
    const hold =
      judged.length && !afterReboot
        ? await judgeGone(uniqueNamespaces(judged), uniqueNamespaces(rows.filter((r) => r.netnsPath)).length)
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
        await this.teardown(rec, 'reconcile: dataplane and namespace gone');
        summary.released++;
      }),
    );
    for (const [outcomeName, n] of Object.entries({
      orphan_removed: summary.orphansRemoved,
      adopted: summary.adopted,
      repaired: summary.repaired,
      released: summary.released,
      healthy: summary.healthy,
    })) {
      this.metrics.reconciled.inc({ outcome: outcomeName }, n);
    }
    // Not being able to record it (a full disk) costs nothing now: the next start looks again.
    await this.store.recordReconciledBoot().catch((err: unknown) => {
      summary.warnings.push(`could not record this boot in the store: ${(err as Error).message}`);
    });
    this.lastReconcile = summary;
    this.log.info({ ...summary, ms: Date.now() - started }, 'reconcile finished');
    return summary;
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
    return unclaimed.map((u) => {
      const slash = u.key.lastIndexOf('/');
      return {
        key: u.key,
        workloadId: u.key.slice(0, slash),
        ifName: u.key.slice(slash + 1),
        netnsPath: '',
        netnsInode: 0,
        ips: u.addresses.map((address) => {
          const family = address.includes(':') ? 6 : 4;
          return { family, address, gateway: family === 4 ? GATEWAY_V4 : GATEWAY_V6 };
        }),
        mtu: u.mtu,
        backend: backend.name,
        network: network.name,
        origin: 'adopted',
        state: 'ready',
        createdAt: new Date().toISOString(),
        dataplane: u.dataplane,
      };
    });
  }

  /**
   * Records every adopted workload, and that the store is no longer new, in one transaction: a start
   * killed before it commits leaves the store new, so the next start adopts them all again instead of
   * taking the ones not yet recorded for orphans (one transaction is also what makes adopting
   * thousands take milliseconds rather than one disk sync each).
   */
  private async adopt(adopted: AttachmentRecord[], summary: ReconcileSummary): Promise<void> {
    for (const record of adopted) for (const ip of record.ips) this.restoreAllocation(record, ip);
    await this.store.recordFirstReconcile(adopted, this.networks.cursors());
    for (const record of adopted) this.counted(record, 1);
    summary.adopted += adopted.length;
    if (adopted.length === 0) return;
    const message =
      `the store at ${this.store.dir} is new, but the dataplane holds ${adopted.length} workload(s) ` +
      'it does not know: adopted them (their addresses are held; Detach removes them) instead of deleting ' +
      'them as orphans. If the state was lost, see "A lost state store" in docs/troubleshooting.md';
    summary.warnings.push(message);
    this.log.error({ adopted: adopted.map((u) => u.key) }, message);
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

  async status(): Promise<ServiceStatus> {
    const healths = new Map(
      await Promise.all(this.networks.backends().map(async (b) => [b, await backendHealth(b)] as const)),
    );
    const writes = this.store.writeHealth();
    const several = this.networks.networks.length > 1;
    const reasons: string[] = [];
    const networks: NetworkStatus[] = [];
    // Each supply's status() resets the pool gauges (pools come and go): read them all, then set.
    const supplies = this.networks.networks.map((n) => [n, n.pools.status()] as const);
    for (const [network, poolStatus] of supplies) {
      const health = healths.get(network.backend) ?? { ready: false, reasons: [] };
      const own = [...health.reasons.filter(() => !health.ready)];
      if (!health.ready && own.length === 0) own.push(`backend ${network.backend.name} is not ready`);
      own.push(...poolStatus.reasons);
      const pools: PoolUsage[] = poolStatus.pools.map((p) => ({ ...p, network: network.name }));
      for (const p of pools) {
        this.metrics.poolSize.set({ pool: p.cidr, family: String(p.family) }, p.size);
        this.metrics.poolUsed.set({ pool: p.cidr, family: String(p.family) }, p.used);
      }
      for (const r of own)
        if (!reasons.includes(r)) reasons.push(several ? `network ${network.name}: ${r}` : r);
      networks.push({
        name: network.name,
        backend: network.backend.name,
        ready: own.length === 0,
        reasons: own,
        mtu: network.config.mtu,
        defaultRoute: network.config.defaultRoute,
        routes: network.config.defaultRoute ? [] : network.ranges(),
        pools,
        backendDetails: { ...(health.details ?? {}) },
        attachments: this.perNetwork.get(network.name) ?? 0,
      });
      this.metrics.networkReady.set(
        { network: network.name, backend: network.backend.name },
        own.length ? 0 : 1,
      );
      this.metrics.networkAttachments.set({ network: network.name }, this.perNetwork.get(network.name) ?? 0);
    }
    if (!writes.ok) reasons.push(`${writes.reason} (writes failing since ${writes.since})`);
    const held = this.sweeper.hold;
    if (held) reasons.push(held.reason);
    const attachments = this.store.count();
    this.metrics.attachments.set(attachments);
    for (const [b, health] of healths) {
      this.metrics.backendReady.set({ backend: b.name }, health.ready ? 1 : 0);
      const details: Record<string, string | number | boolean> = health.details ?? {};
      if (details.agentSocket !== undefined) {
        // Agent-based backends report their live session (sessionId) in the health details.
        this.metrics.agentConnected.set(details.sessionId || health.dpus?.some((d) => d.connected) ? 1 : 0);
        if (typeof details.lastHeartbeatAgeMs === 'number')
          this.metrics.agentHeartbeatAge.set(details.lastHeartbeatAgeMs / 1000);
      }
    }
    const dpus = [...healths.values()].flatMap((h) => h.dpus ?? []);
    if (dpus.length) this.metrics.setDpus(dpus);
    const primary = this.networks.primary;
    const primaryHealth = healths.get(primary.backend);
    const primarySupply = supplies.find(([n]) => n === primary)?.[1];
    return {
      ready: reasons.length === 0,
      reasons,
      backend: primary.backend.name,
      backendDetails: { ...(primaryHealth?.details ?? {}) },
      pools: networks.flatMap((n) => n.pools),
      poolSource: primarySupply?.source,
      attachments,
      reconcile: this.lastReconcile,
      networks,
      dpus: dpus.length ? dpus : undefined,
    };
  }

  async list(): Promise<Iterable<Attachment>> {
    return this.visibleRows();
  }

  private *visibleRows(): Generator<Attachment> {
    for (const rec of this.store.rows()) if (!this.programming.has(rec.key)) yield this.withState(rec);
  }

  async get(workloadId: string, ifName?: string): Promise<Attachment[]> {
    validateWorkloadId(workloadId);
    const found = (
      ifName
        ? [this.store.get(attachmentKey(workloadId, validateIfName(ifName)))].filter(isDefined)
        : this.store.byWorkload(workloadId)
    ).filter((r) => !this.programming.has(r.key));
    if (found.length === 0)
      throw notFound(`workload ${workloadId}${ifName ? ` has no interface ${ifName}` : ' is not attached'}`);
    return found.map((r) => this.withState(r));
  }

  /** The public view, with the state the backend sees now (a DPU port whose agent is away: degraded). */
  private withState(rec: AttachmentRecord): Attachment {
    const view = publicView(rec);
    const state = this.networks.backendOf(rec).attachmentState?.(toView(rec));
    return state && state !== view.state ? { ...view, state } : view;
  }

  async check(workloadId: string, ifName: string): Promise<Drift[]> {
    validateWorkloadId(workloadId);
    const key = attachmentKey(workloadId, validateIfName(ifName || DEFAULT_IF_NAME));
    return this.locks.run(workloadId, async () => {
      const rec = this.store.get(key);
      if (!rec) throw notFound(`workload ${workloadId} has no attachment ${key}`);
      return this.networks.backendOf(rec).check(toView(rec));
    });
  }

  /**
   * Releases, now, the attachments the leak sweep would, even while its guard holds (the operator
   * asked); with `dryRun`, only says which.
   */
  sweep(dryRun: boolean): Promise<SweepResult> {
    return dryRun ? this.sweeper.preview() : this.sweeper.sweep(true);
  }

  async gc(
    keep: Array<{ workloadId: string; ifName?: string }>,
    origin?: string,
    network?: string,
  ): Promise<GcResult> {
    if (network !== undefined) this.networks.get(validateNetworkName(network));
    const wholeWorkloads = new Set<string>();
    const keys = new Set<string>();
    for (const k of keep) {
      validateWorkloadId(k.workloadId);
      if (k.ifName) keys.add(attachmentKey(k.workloadId, validateIfName(k.ifName)));
      else wholeWorkloads.add(k.workloadId);
    }
    const doomed = this.store
      .all()
      .filter(
        (r) =>
          (origin === undefined || (r.origin ?? 'api') === origin) &&
          (network === undefined || (r.network || DEFAULT_NETWORK) === network) &&
          !wholeWorkloads.has(r.workloadId) &&
          !keys.has(r.key),
      );
    const removed: string[] = [];
    await Promise.all(
      doomed.map((rec) =>
        this.locks.run(rec.workloadId, async () => {
          const current = this.store.get(rec.key);
          if (!current) return;
          await this.teardown(current, 'gc');
          removed.push(rec.key);
        }),
      ),
    );
    this.log.info({ removed: removed.length, kept: keep.length }, 'gc finished');
    return { removed: removed.sort() };
  }
}

/** A repeated Attach: the same namespace gets the recorded result; another one is refused. */
function sameAttachment(existing: AttachmentRecord, req: AttachRequest, netns: Netns): AttachmentRecord {
  const network = existing.network || DEFAULT_NETWORK;
  if (network !== req.network)
    throw alreadyExists(
      `workload ${req.workloadId} already has ${req.ifName} on network ${network}; detach it before attaching it to network ${req.network}`,
    );
  if (existing.netnsPath === req.netnsPath && existing.netnsInode === netns.inode) return existing;
  throw alreadyExists(
    `workload ${req.workloadId} is already attached as ${req.ifName} in ${existing.netnsPath}; detach it before attaching it to another namespace`,
  );
}

function newRecord(
  req: AttachRequest,
  netns: Pick<Netns, 'inode' | 'dirDev'>,
  allocated: AllocatedIp[],
  backend: string,
  defaultRoute: boolean,
  routes: string[] | undefined,
): AttachmentRecord {
  return {
    key: req.key,
    workloadId: req.workloadId,
    ifName: req.ifName,
    netnsPath: req.netnsPath,
    netnsInode: netns.inode,
    ...(netns.dirDev !== undefined ? { netnsDirDev: netns.dirDev } : {}),
    containerId: req.containerId,
    pod: req.pod,
    ips: allocated.map((a) => ({
      family: a.family,
      address: a.address,
      gateway: a.family === 4 ? GATEWAY_V4 : GATEWAY_V6,
    })),
    mtu: req.mtu,
    backend,
    network: req.network,
    defaultRoute,
    ...(routes ? { routes } : {}),
    dns: req.dns,
    origin: req.origin,
    state: 'ready',
    createdAt: new Date().toISOString(),
  };
}

/** Whether programming reported exactly what was planned (then the row written meanwhile is final). */
function sameDataplane(a: DataplaneResult, b: DataplaneResult): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}

function isDefined<T>(v: T | undefined): v is T {
  return v !== undefined;
}

function toSpec(rec: AttachmentRecord): Omit<AttachSpec, 'netns'> {
  return {
    key: rec.key,
    workloadId: rec.workloadId,
    ifName: rec.ifName,
    netnsPath: rec.netnsPath,
    netnsInode: rec.netnsInode,
    ips: rec.ips,
    mtu: rec.mtu,
    network: rec.network,
    defaultRoute: rec.defaultRoute,
    routes: rec.routes,
  };
}

function toView(rec: AttachmentRecord): AttachmentView {
  return { ...toSpec(rec), dataplane: rec.dataplane };
}

function publicView(rec: AttachmentRecord): Attachment {
  const { netnsInode: _inode, netnsDirDev: _dirDev, ...rest } = rec;
  return rest;
}

async function backendHealth(b: Backend): Promise<BackendHealth> {
  return b.health().catch((err: unknown) => ({
    ready: false,
    reasons: [`backend health check failed: ${asWorkloadNetError(err).message}`],
    details: {},
  }));
}
