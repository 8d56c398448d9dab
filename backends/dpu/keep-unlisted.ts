import type { AgentAdoption } from '../../core/reconcile/agent-adoption';
import type { Logger } from '../../core/logger';

// Which agents' snapshots keep the ports they do not list (SnapshotBegin.keep_unlisted): those the
// store has not yet finished a first full sync with (core/reconcile/agent-adoption.ts). Once that sync
// is recorded, the agent's next snapshot removes every port the store does not list, so a Delete the
// agent acked and then lost cannot leave a port live while its address goes to another workload.
// Each agent is asked on its own: one still in doubt does not keep another's lost Delete alive.

export class KeepUnlisted {
  private adoption: AgentAdoption | undefined;
  private storeIsNew = false;
  /** Agents whose first full sync finished in this run (their record may still be on its way). */
  private readonly synced = new Set<string>();

  constructor(private readonly log: Logger) {}

  /** From the start-up reconcile, before the first snapshot. */
  restored(storeIsNew: boolean, adoption: AgentAdoption | undefined): void {
    this.storeIsNew = storeIsNew;
    this.adoption = adoption;
  }

  /** Whether the agent's snapshots keep the ports they do not list. */
  keeps(agentId: string): boolean {
    if (this.synced.has(agentId)) return false;
    return this.adoption ? this.adoption.keepsUnlisted(agentId) : this.storeIsNew;
  }

  /** A snapshot was applied: the first one with an agent in doubt ends the doubt. */
  snapshotApplied(agentId: string): void {
    if (!this.keeps(agentId)) return;
    this.synced.add(agentId);
    this.log.info(
      { agentId },
      'first full sync with this DPU agent: from its next snapshot on, ports this store does not list are removed',
    );
    void this.adoption?.record(agentId).catch((err: unknown) => {
      this.log.warn(
        { agentId, err: (err as Error).message },
        'could not record the first full sync with a DPU agent; the next start keeps its unlisted ports again',
      );
    });
  }
}
