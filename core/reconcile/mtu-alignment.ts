import type { Backend } from '../backend';
import type { AttachmentLedger } from '../attach/attachment-ledger';
import { toView } from '../attach/attachment-views';
import { asWorkloadNetError } from '../errors';
import type { Network, NetworkSet } from '../ipam/network';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { NetnsOpener } from '../netns-opener';
import type { AttachmentRecord } from '../store/attachment-record';
import type { Store } from '../store/store';
import { SerialRun } from '../../lib/serial-run';

// An interface takes its network's MTU when it is attached; the network's MTU changes with a restart
// (another configured value) or while the daemon runs ("auto" follows what the fabric carries, known
// once its dataplane is prepared, changed when the uplink's MTU or the mode did). An interface left
// at the old value sends packets the fabric drops (too large) or wastes the path (too small). So after
// the start-up reconcile, and whenever what the fabric carries changes, every attachment whose MTU is
// its network's and differs from the network's now is changed in place through its backend — never
// re-attached: the workload keeps its interface, addresses and sockets.
//
// Each change runs under the workload's lock against the row as it is then (an attachment detached
// or attached again meanwhile is another one, and left alone), in the namespace recorded with it: a
// namespace that is gone or re-pointed is the leak sweep's business, not this one's. An MTU the
// Attach call asked for is the caller's and kept.

/** What changing the MTU of a network's attachments did, for Status. */
export interface MtuAlignmentCounts {
  /** Attachments given the network's MTU in place since the daemon started. */
  updated: number;
  /** Attachments whose last change failed: they still run with another MTU than the network's. */
  failed: number;
}

export class MtuAlignment {
  private readonly runs: SerialRun;
  private started = false;
  private stopped = false;
  private readonly updated = new Map<string, number>();
  /** Keys whose last change failed, by network name. */
  private readonly failing = new Map<string, Set<string>>();
  /** Backends without setMtu already named in the log, so that each pass does not say it again. */
  private readonly unsupportedSaid = new Set<Backend>();

  constructor(
    private readonly ledger: AttachmentLedger,
    private readonly netns: NetnsOpener,
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {
    this.runs = new SerialRun(
      () => this.pass(),
      () => this.stopped,
    );
    // A change before the start-up reconcile is covered by the pass that follows it.
    for (const n of this.networks.networks) n.onMtuChange(() => this.started && void this.kick());
  }

  private get store(): Store {
    return this.ledger.store;
  }

  private get networks(): NetworkSet {
    return this.ledger.networks;
  }

  /** After the start-up reconcile: a first pass now, in the background, and one per change from now on. */
  start(): void {
    this.started = true;
    void this.kick();
  }

  /** One pass now, or once more after the one under way; resolves when it is done. */
  kick(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return this.runs.run().catch((err: unknown) => {
      this.log.warn({ err: (err as Error).message }, 'MTU pass failed; the next change tries again');
    });
  }

  /**
   * Before the store closes: no further change starts; the one under way gets up to `boundMs` to
   * finish (a pass waiting for a workload's lock behind an attach that never answers is not waited
   * for: once it gets the lock it changes nothing).
   */
  async stop(boundMs: number): Promise<void> {
    this.stopped = true;
    const current = this.runs.current?.catch(() => undefined);
    if (!current) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([current, new Promise((resolve) => (timer = setTimeout(resolve, boundMs)))]);
    clearTimeout(timer);
  }

  /** Status's figures for one network. */
  counts(network: string): MtuAlignmentCounts {
    // A failed one detached since is no longer one (the next pass forgets it).
    let failed = 0;
    for (const key of this.failing.get(network) ?? []) if (this.store.get(key)) failed++;
    return { updated: this.updated.get(network) ?? 0, failed };
  }

  private async pass(): Promise<void> {
    const unsupported = new Map<Backend, number>();
    // What to look at is taken from the rows up front; each row is read again under its lock.
    const due: Array<{ rec: AttachmentRecord; network: Network }> = [];
    for (const rec of this.store.rows()) {
      const network = this.networks.of(rec);
      const target = network && this.target(rec, network);
      if (!network || target === undefined || target === rec.mtu) continue;
      if (!network.backend.setMtu) {
        unsupported.set(network.backend, (unsupported.get(network.backend) ?? 0) + 1);
        continue;
      }
      due.push({ rec, network });
    }
    // What failed before and is no longer due (detached, changed since, asked for) is no failure now.
    const dueKeys = new Set(due.map((d) => d.rec.key));
    for (const keys of this.failing.values()) for (const key of keys) if (!dueKeys.has(key)) keys.delete(key);
    for (const [backend, n] of unsupported) {
      if (this.unsupportedSaid.has(backend)) continue;
      this.unsupportedSaid.add(backend);
      this.log.warn(
        { backend: backend.name, attachments: n },
        `backend ${backend.name} cannot change a running interface's MTU: ${n} attachment(s) keep the MTU they were attached with until attached again`,
      );
    }
    // One at a time: this is background work beside the API's, and each is a few netlink requests.
    for (const { rec, network } of due) {
      if (this.stopped) return;
      await this.ledger.locked(rec.workloadId, () => this.apply(rec.key, rec.createdAt, network));
    }
  }

  /** The MTU a row should have now; undefined when it keeps its own (asked for, or not known yet). */
  private target(rec: AttachmentRecord, network: Network): number | undefined {
    if (rec.mtuAsked || !rec.netnsPath || !rec.dataplane) return undefined;
    return network.settledMtu(rec.endpoint || undefined);
  }

  /** Changes one attachment's MTU, if its row is still the one seen. The caller holds its lock. */
  private async apply(key: string, createdAt: string, network: Network): Promise<void> {
    if (this.stopped) return;
    const rec = this.store.get(key);
    if (!rec || rec.createdAt !== createdAt) return;
    const mtu = this.target(rec, network);
    if (mtu === undefined || mtu === rec.mtu) return;
    const backend = network.backend;
    if (!backend.setMtu) return;
    // Only in the namespace recorded with it: one that is gone, or a path that names another now, is
    // the leak sweep's to judge; this changes nothing there.
    const ns = await this.netns.openWorkload(rec.netnsPath).catch(() => undefined);
    if (!ns) return;
    const failing = this.failing.get(network.name) ?? new Set<string>();
    this.failing.set(network.name, failing);
    try {
      if (ns.inode !== rec.netnsInode) return;
      await backend.setMtu(toView(rec), ns, mtu);
    } catch (err) {
      failing.add(key);
      this.metrics.mtuChanges.inc({ outcome: 'failed' });
      this.log.warn(
        { key, network: network.name, from: rec.mtu, to: mtu, err: asWorkloadNetError(err).message },
        'cannot change the MTU of a running interface; it keeps its own until the next change or start',
      );
      return;
    } finally {
      ns.close();
    }
    const next: AttachmentRecord = {
      ...rec,
      mtu,
      ...(rec.dataplane ? { dataplane: { ...rec.dataplane, mtu } } : {}),
    };
    await this.store.put(next);
    this.ledger.mtuChanged(rec, next);
    failing.delete(key);
    this.updated.set(network.name, (this.updated.get(network.name) ?? 0) + 1);
    this.metrics.mtuChanges.inc({ outcome: 'updated' });
  }
}
