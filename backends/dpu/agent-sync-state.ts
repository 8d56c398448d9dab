import type { AgentInventory } from './agent-inventory';
import type { FabricCarriage } from './fabric-carriage';
import { FabricDesired } from './fabric-desired';
import { peerNodeOf } from './fabric-plan';
import { PeerStateBook } from './peer-state-book';
import type { SnapshotSync } from './snapshot-sync';

// What the backend tracks of its exchange with one agent (by agent id, across its sessions): the
// snapshot in flight, Deletes sent and not yet acked, and Deletes the agent must still confirm. Each
// agent holds only the ports placed on it, so each has its own. From version 3 also its fabric: the
// objects it should hold, the fabric Deletes not yet acked, and its latest word on its peers.

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
  /** Whether its current (or last) session carries the fabric, and why not. */
  carriage: FabricCarriage = { carries: false, why: 'not connected yet' };
  /** The fabric objects it should hold (fabric-plan.ts), kept while it is away. */
  readonly fabric = new FabricDesired();
  /** Fabric Deletes sent and not yet acked: name → generation of the Delete. */
  readonly fabricTombstones = new Map<string, number>();
  /** Its word on its peers, from its PeerStatus messages this session; empty until it sends one. */
  readonly peers = new PeerStateBook(peerNodeOf);

  constructor(readonly agentId: string) {}
}
