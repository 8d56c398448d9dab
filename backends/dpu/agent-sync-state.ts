import type { AgentInventory } from './agent-inventory';
import type { SnapshotSync } from './snapshot-sync';

// What the backend tracks of its exchange with one agent (by agent id, across its sessions): the
// snapshot in flight, Deletes sent and not yet acked, and Deletes the agent must still confirm. Each
// agent holds only the ports placed on it, so each has its own.

export class AgentSyncState {
  sync: SnapshotSync | undefined;
  lastSyncMs: number | undefined;
  /** Deletes sent and not yet acked: name → generation of the Delete. */
  readonly tombstones = new Map<string, number>();
  /**
   * While snapshots keep unlisted ports (a new store), a port this daemon itself removed is not removed
   * by the next snapshot: its Delete is kept here until the agent confirms it, and sent again after
   * every snapshot until then.
   */
  readonly unconfirmedDeletes = new Map<string, number>();
  /** The last inventory and protocol version it reported, kept while it is away (for Status). */
  inventory: AgentInventory | undefined;
  version = 0;

  constructor(readonly agentId: string) {}
}
