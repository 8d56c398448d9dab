import { randomUUID } from 'node:crypto';
import { Admission } from './admission';
import type { AttachSpec, CheckScope, DataplaneResult, Drift } from '../backend';
import { attachmentKey, type AttachmentKey } from '../attachment-key';
import type { DaemonConfig } from '../config';
import { invalidArgument, unavailable } from '../errors';
import { metered } from './metered';
import { HOST_PORT_ORIGIN, HOST_PORT_WORKLOAD_ID } from './host-port-row';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { Netns } from '../../lib/netns/netns-handle';
import type { NetnsOpener } from '../netns-opener';
import type { Network, NetworkSet } from '../ipam/network';
import type { AttachmentRecord } from '../store/attachment-record';
import type { Store } from '../store/store';
import type { AttachmentLedger } from './attachment-ledger';
import { toSpec, toView } from './attachment-views';
import { AttachmentReads } from './attachment-reads';
import { newRecord } from './new-record';
import { sameAttachment } from './repeated-attach';
import {
  validateAttach,
  validateIfName,
  validateWorkloadId,
  validateNetworkName,
  type AttachRequest,
} from './validation';
import type { AttachCall, Attachment, DetachCall } from '../workload-service';

/**
 * Attaches that open their namespace and program at once; more wait in order (up to maxInFlight, past
 * which calls are refused). Enough to keep a threadpool and an agent stream busy.
 */
const ATTACH_CONCURRENCY = 32;

/**
 * Attach, Detach and the reads of single attachments. Attach reads top-down like a CNI plugin's cmdAdd:
 * validate, open the namespace, lock the workload, allocate (its undo right below), plan, program and
 * record, answer. Admission and metrics wrap it; they do not split it.
 */
export class Orchestrator {
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
  private readonly reads: AttachmentReads;

  constructor(
    private readonly ledger: AttachmentLedger,
    private readonly netns: NetnsOpener,
    config: DaemonConfig,
    private readonly log: Logger,
    private readonly metrics: Metrics,
  ) {
    this.admission = new Admission(config.maxInFlight, ATTACH_CONCURRENCY);
    this.reads = new AttachmentReads(ledger, this.programming);
  }

  private get store(): Store {
    return this.ledger.store;
  }

  private get networks(): NetworkSet {
    return this.ledger.networks;
  }

  attach(call: AttachCall): Promise<Attachment> {
    const label = { backend: this.networks.primary.backend.name };
    return metered(this.metrics, 'attach', label, () => {
      // The network first: an unknown one is refused before anything.
      const network = this.networks.get(validateNetworkName(call.network));
      label.backend = network.backend.name;
      const req = validateAttach({ ...call, network: network.name });
      if (req.workloadId === HOST_PORT_WORKLOAD_ID)
        throw invalidArgument(
          `workload id ${HOST_PORT_WORKLOAD_ID} is the daemon's own host port (docs/fabric.md); use another id`,
        );
      return this.admission.run(() => this.tracked(this.attachWorkload(req, network)));
    });
  }

  /**
   * The host port (core/host-port/host-port.ts): the daemon's own attachment of the node's namespace,
   * through the same flow as any Attach. The namespace is opened by the caller, since a caller's Attach
   * may not name the host's; the interface carries no default route, only `routes`.
   */
  attachHostPort(
    call: Omit<AttachCall, 'workloadId' | 'origin'>,
    netns: Netns,
    routes: string[],
  ): Promise<Attachment> {
    const network = this.networks.get(validateNetworkName(call.network));
    const req = validateAttach({
      ...call,
      workloadId: HOST_PORT_WORKLOAD_ID,
      origin: HOST_PORT_ORIGIN,
      network: network.name,
    });
    return metered(this.metrics, 'attach', { backend: network.backend.name }, () =>
      this.admission.run(() => this.tracked(this.attachWorkload(req, network, { netns, routes }))),
    );
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
  private async attachWorkload(
    req: AttachRequest,
    network: Network,
    host?: { netns: Netns; routes: string[] },
  ): Promise<Attachment> {
    const ctx = logFields(req);
    const backend = network.backend;
    const netns = host?.netns ?? (await this.netns.openWorkload(req.netnsPath));
    try {
      return await this.ledger.locked(req.workloadId, async () => {
        const existing = this.store.get(req.key);
        if (existing) return sameAttachment(existing, req, netns);
        // Before anything is taken: a gate that cannot know what it needs (a pod's labels) refuses here.
        const admitted = await this.ledger.gate?.admit(req);

        // Where the port will live, before its address: the address comes from that place's slice of
        // the node's ranges (core/fabric/slice-book.ts). place() changes nothing (a DPU backend
        // just restarted waits there for its agents, as attach would).
        const placed = await backend.place?.({
          workloadId: req.workloadId,
          ifName: req.ifName,
          network: req.network,
          dpu: req.dpu,
          dpuPort: req.dpuPort,
        });
        // A call's MTU is kept as asked; else the network's, known once the port's place is (a DPU's
        // overlay MTU is its own uplink's less the encapsulation).
        const mtu = req.mtu ?? network.mtu(placed?.dpu);
        const allocated = await network.allocate(placed?.endpoint);
        try {
          // The host port never takes the host's default route: it routes the cluster's ranges only.
          const defaultRoute =
            !host &&
            network.config.defaultRoute &&
            (await this.ledger.claimDefaultRoute(netns.inode, req.key));
          const routes = defaultRoute ? undefined : (host?.routes ?? network.ranges());
          const record = newRecord(
            { ...req, mtu, mtuAsked: req.mtu !== undefined },
            netns,
            allocated,
            backend.name,
            defaultRoute,
            routes,
          );
          if (placed !== undefined) record.endpoint = placed.endpoint ?? '';
          const spec: AttachSpec = {
            ...toSpec(record),
            netns,
            dpu: placed?.dpu ?? req.dpu,
            dpuPort: req.dpuPort,
          };
          record.dataplane = backend.plan(spec);
          await this.programAndRecord(record, spec, network, admitted);
          this.ledger.added(record);
          this.log.info(
            { ...ctx, ips: record.ips.map((i) => i.address), hostIf: record.dataplane.hostIfName },
            'attached',
          );
          return record;
        } catch (err) {
          // A row that could not be removed keeps its addresses: they follow the row (see reconcile).
          if (!this.rowLeft(req.key)) {
            network.release(allocated.map((a) => a.address));
            this.ledger.dropDefaultRoute(netns.inode, req.key);
          } else this.ledger.added({ network: req.network, mtu, endpoint: placed?.endpoint });
          this.log.warn({ ...ctx, err: (err as Error).message }, 'attach failed; rolled back');
          throw err;
        }
      });
    } finally {
      // A namespace the caller opened is the caller's to close.
      if (!host) netns.close();
    }
  }

  /**
   * The one way an attachment is recorded. The row, with the planned dataplane and marked unfinished,
   * is written in one durable transaction while the backend programs, and stays hidden from List and
   * Get until both are done. If the backend reports more than it planned (an agent's endpoint), the row
   * is rewritten, finished, before the answer. A crash in between leaves an unfinished row, an attach
   * whose caller was told it failed: the next start removes it when its dataplane is not all there
   * (core/reconcile/cut-short.ts) rather than programming it again; or a dataplane without a row, which
   * carries the attachment's name and is removed as an orphan.
   */
  private async programAndRecord(
    record: AttachmentRecord,
    spec: AttachSpec,
    network: Network,
    admitted: unknown,
  ): Promise<void> {
    const planned = record.dataplane as DataplaneResult;
    if (this.stopping) throw unavailable('the daemon is shutting down; retry once it is back');
    this.programming.add(record.key);
    try {
      // The gate's part (a pod's policy rules) goes in beside the programming: an interface is matched
      // by name, so its rules may be in force before it exists, and the answer waits for both.
      const [programmed, stored, gated] = await Promise.allSettled([
        network.backend.attach(spec, planned),
        this.store.put({ ...record, unfinished: true }, this.networks.cursors()),
        admitted === undefined ? undefined : this.ledger.gate?.enforce(admitted, record),
      ]);
      if (this.cancelled.has(record.key)) {
        // Shutdown removed the row and the caller has gone: whatever the backend did is undone.
        await this.undoProgramming(record);
        throw unavailable('the attach was cancelled by the daemon shutting down; retry once it is back');
      }
      let failure: unknown = [programmed, stored, gated].find((r) => r.status === 'rejected')?.reason;
      if (
        programmed.status === 'fulfilled' &&
        stored.status === 'fulfilled' &&
        gated.status === 'fulfilled'
      ) {
        if (sameDataplane(programmed.value, planned)) {
          // The plan was the whole answer (the Linux backend): the row is right but for its mark, which
          // goes without holding the answer for a second disk flush. In the moment before it does, a
          // crash leaves a mark that the next start drops again when the dataplane is there.
          this.finishLater(record);
          return;
        }
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

  /** Drops an answered attach's unfinished mark in the background (see programAndRecord). */
  private finishLater(record: AttachmentRecord): void {
    this.store.markFinished(record.key, record.createdAt).catch((err: unknown) => {
      this.log.warn(
        { workloadId: record.workloadId, ifName: record.ifName, err: (err as Error).message },
        'could not record an attach as finished; the next start checks its dataplane instead',
      );
    });
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

  /** Takes down whatever of a failed attach's dataplane is left, and the gate's part. */
  private async undoProgramming(rec: AttachmentRecord): Promise<void> {
    try {
      await this.networks.backendOf(rec).detach(toView(rec));
    } catch (err) {
      this.log.warn(
        { workloadId: rec.workloadId, ifName: rec.ifName, err: (err as Error).message },
        'rollback teardown failed; reconcile removes leftovers',
      );
    }
    await this.ledger.gate?.release(rec.key);
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
    return metered(this.metrics, 'detach', { backend: this.networks.primary.backend.name }, async () => {
      const workloadId = validateWorkloadId(call.workloadId);
      const ifName = call.ifName ? validateIfName(call.ifName) : undefined;
      const ctx = { workloadId, ifName, requestId: randomUUID() };
      await this.detachPace.run(() =>
        this.ledger.locked(workloadId, async () => {
          const records = ifName
            ? [this.store.get(attachmentKey(workloadId, ifName))].filter(isDefined)
            : this.store.byWorkload(workloadId);
          for (const rec of records) await this.ledger.teardown(rec, 'detach');
          this.log.info(
            { ...ctx, detached: records.length },
            records.length ? 'detached' : 'detach of unknown workload: nothing to do',
          );
        }),
      );
    });
  }

  async list(): Promise<Iterable<Attachment>> {
    return this.reads.list();
  }

  /** A page of ListStream (see AttachmentReads.listPage). */
  async listPage(after: AttachmentKey | undefined, limit: number): Promise<Attachment[]> {
    return this.reads.listPage(after, limit);
  }

  async get(workloadId: string, ifName?: string): Promise<Attachment[]> {
    return this.reads.get(workloadId, ifName);
  }

  async check(workloadId: string, ifName: string, scope: CheckScope = 'full'): Promise<Drift[]> {
    return this.reads.check(workloadId, ifName, scope);
  }
}

/** Whether programming reported exactly what was planned (then the row written meanwhile is final). */
function sameDataplane(a: DataplaneResult, b: DataplaneResult): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}

/**
 * The fields every log line of an attach carries, passed with each line: a pino child per call cost
 * more of the event loop than the attach's own planning (docs/benchmarks.md), and a call logs one line.
 */
function logFields(req: AttachRequest): Record<string, string> {
  return { workloadId: req.workloadId, ifName: req.ifName, network: req.network, requestId: randomUUID() };
}

function isDefined<T>(v: T | undefined): v is T {
  return v !== undefined;
}
