import { attachmentKey } from '../attachment-key';
import type { AttachmentLedger } from '../attach/attachment-ledger';
import { validateIfName, validateNetworkName, validateWorkloadId } from '../attach/validation';
import { DEFAULT_NETWORK } from '../config';
import { isHostPort } from '../attach/host-port-row';
import type { Logger } from '../logger';
import type { GcResult } from '../workload-service';

// GC by a keep list, as CNI GC and `workloadnet gc` ask it: every attachment not named (scoped to one
// origin or network if asked) is detached. The caller's list is the evidence that the rest is dead; the
// list is checked whole before anything is removed. The host port is no caller's workload, so no
// caller's list names it: it is never taken (attach/host-port-row.ts).

export class KeepListGc {
  constructor(
    private readonly ledger: AttachmentLedger,
    private readonly log: Logger,
  ) {}

  async run(
    keep: Array<{ workloadId: string; ifName?: string }>,
    origin?: string,
    network?: string,
  ): Promise<GcResult> {
    if (network !== undefined) this.ledger.networks.get(validateNetworkName(network));
    const wholeWorkloads = new Set<string>();
    const keys = new Set<string>();
    for (const k of keep) {
      validateWorkloadId(k.workloadId);
      if (k.ifName) keys.add(attachmentKey(k.workloadId, validateIfName(k.ifName)));
      else wholeWorkloads.add(k.workloadId);
    }
    const doomed = this.ledger.store
      .all()
      .filter(
        (r) =>
          !isHostPort(r) &&
          (origin === undefined || (r.origin ?? 'api') === origin) &&
          (network === undefined || (r.network || DEFAULT_NETWORK) === network) &&
          !wholeWorkloads.has(r.workloadId) &&
          !keys.has(r.key),
      );
    const removed: string[] = [];
    await Promise.all(
      doomed.map((rec) =>
        this.ledger.locked(rec.workloadId, async () => {
          const current = this.ledger.store.get(rec.key);
          if (!current) return;
          await this.ledger.teardown(current, 'gc');
          removed.push(rec.key);
        }),
      ),
    );
    this.log.info({ removed: removed.length, kept: keep.length }, 'gc finished');
    return { removed: removed.sort() };
  }
}
