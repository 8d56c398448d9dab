import type { CheckScope, Drift } from '../backend';
import { attachmentKey, type AttachmentKey } from '../attachment-key';
import { notFound } from '../errors';
import type { AttachmentRecord } from '../store/attachment-record';
import type { AttachmentLedger } from './attachment-ledger';
import { publicView, toView } from './attachment-views';
import { DEFAULT_IF_NAME, validateIfName, validateWorkloadId } from './validation';
import type { Attachment } from '../workload-service';

// List, ListStream's pages, Get and Check: the reads of recorded attachments, each shown with the
// state its backend sees now. Their own file because they change nothing and share only one thing
// with Attach and Detach (orchestrator.ts): rows still being programmed are hidden from them.

export class AttachmentReads {
  constructor(
    private readonly ledger: AttachmentLedger,
    /** Keys whose row is written while their dataplane is still being programmed: not shown yet. */
    private readonly programming: ReadonlySet<string>,
  ) {}

  list(): Iterable<Attachment> {
    return this.visibleRows();
  }

  /**
   * Up to `limit` attachments in List's order after the one keyed `after`: a page of ListStream. A
   * page is read in one short read transaction, so a client that takes its time holds none.
   */
  async listPage(after: AttachmentKey | undefined, limit: number): Promise<Attachment[]> {
    const page: Attachment[] = [];
    if (limit < 1) return page;
    for (const rec of this.store.rows(after)) {
      if (this.programming.has(rec.key)) continue;
      page.push(this.withState(rec));
      if (page.length >= limit) break;
    }
    return page;
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

  async check(workloadId: string, ifName: string, scope: CheckScope = 'full'): Promise<Drift[]> {
    validateWorkloadId(workloadId);
    const key = attachmentKey(workloadId, validateIfName(ifName || DEFAULT_IF_NAME));
    return this.ledger.locked(workloadId, async () => {
      const rec = this.store.get(key);
      if (!rec) throw notFound(`workload ${workloadId} has no attachment ${key}`);
      return this.networks.backendOf(rec).check(toView(rec), scope);
    });
  }

  private get store(): AttachmentLedger['store'] {
    return this.ledger.store;
  }

  private get networks(): AttachmentLedger['networks'] {
    return this.ledger.networks;
  }
}

function isDefined<T>(v: T | undefined): v is T {
  return v !== undefined;
}
