import { randomUUID } from 'node:crypto';
import { inject, injectable } from 'inversify';
import {
  BACKEND,
  type AttachmentView,
  type AttachSpec,
  type Backend,
  type DataplaneResult,
  type Drift,
  type IpAssignment,
} from './backend';
import { CONFIG, type DaemonConfig } from './config';
import { alreadyExists, asWorkloadNetError, exhausted, notFound } from './errors';
import { IpAllocator } from './ip-allocator';
import { ConcurrencyLimit } from './concurrency-limit';
import { KeyedMutex } from './keyed-mutex';
import { LOGGER, type Logger } from './logger';
import { METRICS, Metrics } from './metrics';
import { netnsStillPresent, openNetnsPath, type OpenNetns } from './netns-path';
import { POOL_SUPPLY, type PoolSupply } from './pool-supply';
import { Store, type AttachmentRecord } from './store';
import { validateIfName, validateMetadata, validateMtu, validateWorkloadId } from './validation';
import type {
  AttachCall,
  Attachment,
  DetachCall,
  GcResult,
  PodMetadata,
  ReconcileSummary,
  ServiceStatus,
  WorkloadService,
} from './workload-service';

export const STORE = Symbol.for('workloadnet.Store');
export const ALLOCATOR = Symbol.for('workloadnet.IpAllocator');

export const DEFAULT_IF_NAME = 'eth0';

/**
 * Attaches that open their namespace and program at once; more wait in order (up to maxInFlight, past
 * which calls are refused). Enough to keep a threadpool and an agent stream busy.
 */
const ATTACH_CONCURRENCY = 32;

interface ValidatedAttach {
  workloadId: string;
  ifName: string;
  mtu: number;
  pod: PodMetadata;
  containerId?: string;
}

/** Attachment key: neither part may contain '/', so the key is unambiguous. */
export const attachmentKey = (workloadId: string, ifName: string): string => `${workloadId}/${ifName}`;

/**
 * The attach/detach flow. Reads top-down like a CNI plugin's cmdAdd/cmdDel: validate, allocate, record,
 * program, confirm; every step's undo sits next to it.
 */
@injectable()
export class Orchestrator implements WorkloadService {
  private readonly locks = new KeyedMutex();
  /** Attaches past validation at once; see concurrency-limit.ts for why. */
  private readonly attachSlots = new ConcurrencyLimit(ATTACH_CONCURRENCY);
  /** Keys whose row is written while their dataplane is still being programmed: not shown yet. */
  private readonly programming = new Set<string>();
  private inFlight = 0;
  private lastReconcile?: ReconcileSummary;

  constructor(
    @inject(BACKEND) private readonly backend: Backend,
    @inject(STORE) private readonly store: Store,
    @inject(ALLOCATOR) private readonly allocator: IpAllocator,
    @inject(CONFIG) private readonly config: DaemonConfig,
    @inject(LOGGER) private readonly log: Logger,
    @inject(METRICS) private readonly metrics: Metrics,
    @inject(POOL_SUPPLY) private readonly pools: PoolSupply,
  ) {}

  /**
   * Loads allocations from the store and reconciles the store with the backend. Called once before the
   * API starts serving.
   */
  async init(): Promise<ReconcileSummary> {
    for (const rec of this.store.all()) for (const ip of rec.ips) this.restoreAllocation(rec, ip);
    this.allocator.restoreCursors(this.store.cursors());
    return this.reconcile();
  }

  private restoreAllocation(rec: AttachmentRecord, ip: IpAssignment): void {
    try {
      this.allocator.markUsed(ip.address);
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
      repaired: 0,
      released: 0,
      healthy: 0,
      warnings: [],
    };
    const ready = this.store.all();
    const outcome = await this.backend.reconcile(ready.map(toView));
    summary.orphansRemoved = outcome.orphansRemoved.length;
    summary.healthy = outcome.healthy.length;
    summary.warnings.push(...outcome.warnings);
    const byKey = new Map(ready.map((r) => [r.key, r]));
    await Promise.all(
      outcome.missing.map(async (key) => {
        const rec = byKey.get(key);
        if (!rec) return;
        if (await netnsStillPresent(rec.netnsPath, rec.netnsInode)) {
          try {
            const dataplane = await this.backend.attach(toSpec(rec), rec.dataplane);
            await this.store.put({ ...rec, dataplane });
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
        await this.teardown(rec, 'reconcile: dataplane and namespace gone');
        summary.released++;
      }),
    );
    for (const [outcomeName, n] of Object.entries({
      orphan_removed: summary.orphansRemoved,
      repaired: summary.repaired,
      released: summary.released,
      healthy: summary.healthy,
    })) {
      this.metrics.reconciled.inc({ outcome: outcomeName }, n);
    }
    this.lastReconcile = summary;
    this.log.info({ ...summary, ms: Date.now() - started }, 'reconcile finished');
    return summary;
  }

  attach(call: AttachCall): Promise<Attachment> {
    return this.timed('attach', () => this.doAttach(call));
  }

  detach(call: DetachCall): Promise<void> {
    return this.timed('detach', () => this.doDetach(call));
  }

  /** Runs one API operation and records its latency and result code. */
  private async timed<T>(op: string, fn: () => Promise<T>): Promise<T> {
    const start = process.hrtime.bigint();
    let code = 'OK';
    try {
      return await fn();
    } catch (err) {
      code = asWorkloadNetError(err).code;
      throw err;
    } finally {
      this.metrics.observe(op, this.backend.name, code, Number(process.hrtime.bigint() - start) / 1e9);
    }
  }

  private async doAttach(call: AttachCall): Promise<Attachment> {
    const workloadId = validateWorkloadId(call.workloadId);
    const ifName = validateIfName(call.ifName || DEFAULT_IF_NAME);
    const mtu = validateMtu(call.mtu || this.config.mtu);
    const pod = {
      uid: validateMetadata('pod uid', call.pod?.uid),
      namespace: validateMetadata('pod namespace', call.pod?.namespace),
      name: validateMetadata('pod name', call.pod?.name),
    };
    const containerId = validateMetadata('container id', call.containerId);
    if (this.inFlight >= this.config.maxInFlight) {
      throw exhausted(`too many Attach calls in flight (${this.config.maxInFlight}); retry shortly`);
    }
    this.inFlight++;
    try {
      return await this.attachSlots.run(() =>
        this.attachAdmitted(call, { workloadId, ifName, mtu, pod, containerId }),
      );
    } finally {
      this.inFlight--;
    }
  }

  private async attachAdmitted(call: AttachCall, v: ValidatedAttach): Promise<Attachment> {
    const netns = call.openNetns ?? (await openNetnsPath(call.netnsPath));
    try {
      return await this.attachValidated(call, v, netns);
    } finally {
      if (!call.openNetns) netns.close();
    }
  }

  private async attachValidated(call: AttachCall, v: ValidatedAttach, netns: OpenNetns): Promise<Attachment> {
    const { workloadId, ifName, mtu, pod, containerId } = v;
    const key = attachmentKey(workloadId, ifName);
    const log = this.log.child({ workloadId, ifName, requestId: randomUUID() });
    return this.locks.run(workloadId, async () => {
      const existing = this.store.get(key);
      if (existing) {
        if (existing.netnsPath === call.netnsPath && existing.netnsInode === netns.inode) return existing;
        throw alreadyExists(
          `workload ${workloadId} is already attached as ${ifName} in ${existing.netnsPath}; detach it before attaching it to another namespace`,
        );
      }

      const allocated = await this.pools.allocate();
      const record: AttachmentRecord = {
        key,
        workloadId,
        ifName,
        netnsPath: call.netnsPath,
        netnsInode: netns.inode,
        containerId,
        pod: pod.uid || pod.namespace || pod.name ? pod : undefined,
        ips: allocated.map((a) => ({
          family: a.family,
          address: a.address,
          pool: a.pool.text,
          poolPrefixLength: a.pool.prefixLength,
          gateway: a.family === 4 ? GATEWAY_V4 : GATEWAY_V6,
        })),
        mtu,
        backend: this.backend.name,
        dns: call.dns,
        origin: call.origin ?? 'api',
        state: 'ready',
        createdAt: new Date().toISOString(),
      };
      const spec = { ...toSpec(record), netnsFd: netns.fd };
      const planned = this.backend.plan?.(spec);
      try {
        if (planned) await this.programAndRecord(record, spec, planned);
        else await this.programThenRecord(record, spec);
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'attach failed; rolled back');
        throw err;
      }
      log.info({ ips: record.ips.map((i) => i.address), hostIf: record.dataplane?.hostIfName }, 'attached');
      return record;
    });
  }

  /**
   * The backend knows its result in advance, so the one durable transaction that records the
   * attachment (row and addresses) runs while the dataplane is programmed instead of after it. If the
   * daemon dies in between, start-up reconcile finds the row without its dataplane and repairs it
   * (the namespace is still there) or releases it (it is gone); a dataplane without its row is an
   * orphan that reconcile removes. Until both are done the row is hidden from List and Get.
   */
  private async programAndRecord(record: AttachmentRecord, spec: AttachSpec, planned: DataplaneResult) {
    record.dataplane = planned;
    this.programming.add(record.key);
    try {
      const [programmed, stored] = await Promise.allSettled([
        this.backend.attach(spec, planned),
        this.store.put(record, this.allocator.cursors()),
      ]);
      if (programmed.status === 'fulfilled' && stored.status === 'fulfilled') return;
      if (stored.status === 'fulfilled') {
        try {
          await this.store.remove(record.key);
        } catch (err) {
          // The row stays, so its addresses must stay held too; reconcile settles it at the next start.
          this.log.error(
            { workloadId: record.workloadId, err: (err as Error).message },
            'cannot remove the row of a failed attach; its addresses stay held',
          );
          throw programmed.status === 'rejected' ? programmed.reason : err;
        }
      }
      await this.rollback(record);
      throw programmed.status === 'rejected' ? programmed.reason : (stored as PromiseRejectedResult).reason;
    } finally {
      this.programming.delete(record.key);
    }
  }

  /**
   * The backend's result is only known once it is done (an agent reports it): program, then record.
   * No row exists until the dataplane is programmed: if the daemon dies in between, the dataplane
   * objects carry the attachment's name, so start-up reconcile removes them as orphans, and the
   * addresses, never written, are free again.
   */
  private async programThenRecord(record: AttachmentRecord, spec: AttachSpec): Promise<void> {
    try {
      record.dataplane = await this.backend.attach(spec);
      await this.store.put(record, this.allocator.cursors());
    } catch (err) {
      await this.rollback(record);
      throw err;
    }
  }

  private async doDetach(call: DetachCall): Promise<void> {
    const workloadId = validateWorkloadId(call.workloadId);
    const ifName = call.ifName ? validateIfName(call.ifName) : undefined;
    const log = this.log.child({ workloadId, ifName, requestId: randomUUID() });
    await this.locks.run(workloadId, async () => {
      const records = ifName
        ? [this.store.get(attachmentKey(workloadId, ifName))].filter(isDefined)
        : this.recordsOf(workloadId);
      for (const rec of records) await this.teardown(rec, 'detach');
      log.info(
        { detached: records.length },
        records.length ? 'detached' : 'detach of unknown workload: nothing to do',
      );
    });
  }

  /**
   * Undoes an attach that was never recorded: the backend already rolled back its own steps, and
   * detach is tolerant, so asking it again only makes sure; then the addresses go back to the pool.
   */
  private async rollback(rec: AttachmentRecord): Promise<void> {
    try {
      await this.backend.detach(toView(rec));
    } catch (err) {
      this.log.warn(
        { workloadId: rec.workloadId, ifName: rec.ifName, err: (err as Error).message },
        'rollback teardown failed; reconcile removes leftovers',
      );
    }
    this.allocator.release(rec.ips.map((i) => i.address));
  }

  /**
   * Removes an attachment's dataplane, then its addresses and row. The addresses are released even when
   * the dataplane step fails: a leaked address is worse than a leftover link, which reconcile removes.
   */
  private async teardown(rec: AttachmentRecord, why: string): Promise<void> {
    try {
      await this.backend.detach(toView(rec));
    } catch (err) {
      this.log.warn(
        { workloadId: rec.workloadId, ifName: rec.ifName, why, err: (err as Error).message },
        'dataplane teardown failed; releasing addresses anyway',
      );
    }
    await this.store.remove(rec.key);
    this.allocator.release(rec.ips.map((i) => i.address));
  }

  private recordsOf(workloadId: string): AttachmentRecord[] {
    return this.store.byWorkload(workloadId);
  }

  async status(): Promise<ServiceStatus> {
    const health = await this.backend.health().catch((err: unknown) => ({
      ready: false,
      reasons: [`backend health check failed: ${asWorkloadNetError(err).message}`],
      details: {},
    }));
    const reasons = [...health.reasons.filter(() => !health.ready)];
    if (!health.ready && reasons.length === 0) reasons.push(`backend ${this.backend.name} is not ready`);
    const poolStatus = this.pools.status();
    reasons.push(...poolStatus.reasons);
    const pools = poolStatus.pools;
    for (const p of pools) {
      this.metrics.poolSize.set({ pool: p.cidr, family: String(p.family) }, p.size);
      this.metrics.poolUsed.set({ pool: p.cidr, family: String(p.family) }, p.used);
    }
    const attachments = this.store.count();
    this.metrics.attachments.set(attachments);
    this.metrics.backendReady.set({ backend: this.backend.name }, health.ready ? 1 : 0);
    const details: Record<string, string | number | boolean> = health.details ?? {};
    if (details.agentSocket !== undefined) {
      // Agent-based backends report their live session (sessionId) in the health details.
      this.metrics.agentConnected.set(details.sessionId ? 1 : 0);
      if (typeof details.lastHeartbeatAgeMs === 'number')
        this.metrics.agentHeartbeatAge.set(details.lastHeartbeatAgeMs / 1000);
    }
    return {
      ready: reasons.length === 0,
      reasons,
      backend: this.backend.name,
      backendDetails: { ...(health.details ?? {}) },
      pools,
      poolSource: poolStatus.source,
      attachments,
      reconcile: this.lastReconcile,
    };
  }

  async list(): Promise<Iterable<Attachment>> {
    return this.visibleRows();
  }

  private *visibleRows(): Generator<Attachment> {
    for (const rec of this.store.rows()) if (!this.programming.has(rec.key)) yield publicView(rec);
  }

  async get(workloadId: string, ifName?: string): Promise<Attachment[]> {
    validateWorkloadId(workloadId);
    let found = ifName
      ? [this.store.get(attachmentKey(workloadId, validateIfName(ifName)))].filter(isDefined)
      : this.recordsOf(workloadId);
    found = found.filter((r) => !this.programming.has(r.key));
    if (found.length === 0)
      throw notFound(`workload ${workloadId}${ifName ? ` has no interface ${ifName}` : ' is not attached'}`);
    return found.map(publicView);
  }

  async check(workloadId: string, ifName: string): Promise<Drift[]> {
    validateWorkloadId(workloadId);
    const key = attachmentKey(workloadId, validateIfName(ifName || DEFAULT_IF_NAME));
    return this.locks.run(workloadId, async () => {
      const rec = this.store.get(key);
      if (!rec) throw notFound(`workload ${workloadId} has no attachment ${key}`);
      return this.backend.check(toView(rec));
    });
  }

  async gc(keep: Array<{ workloadId: string; ifName?: string }>, origin?: string): Promise<GcResult> {
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

/** The link-local gateways of the routed model: the node side answers for them on every host link. */
export const GATEWAY_V4 = '169.254.1.1';
export const GATEWAY_V6 = 'fe80::1';

function isDefined<T>(v: T | undefined): v is T {
  return v !== undefined;
}

function toSpec(rec: AttachmentRecord): AttachSpec {
  return {
    key: rec.key,
    workloadId: rec.workloadId,
    ifName: rec.ifName,
    netnsPath: rec.netnsPath,
    netnsInode: rec.netnsInode,
    ips: rec.ips,
    mtu: rec.mtu,
  };
}

function toView(rec: AttachmentRecord): AttachmentView {
  return { ...toSpec(rec), dataplane: rec.dataplane };
}

function publicView(rec: AttachmentRecord): Attachment {
  const { netnsInode: _inode, ...rest } = rec;
  return rest;
}
