import type { Endpoint, PeerState, Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricTable } from './fabric-table';
import type { PolicyEnforcer } from './policy-agent';
import type { PortEntry } from './port-table';
import type { AdoptedVf } from './vf-adoption';
import type { VfIdentity } from './vf-pool';

// What the simulator does to "program" a port. The default does nothing but remember it (a pure
// control-plane agent); the netns dataplane plumbs real interfaces.

export interface Programmed {
  /** The host-side netdev, when the dataplane exposes one. */
  endpoint?: Endpoint;
  /** The DPU-side interface the port's traffic enters by. */
  representor?: string;
}

/** The DPU's uplink as Hello states it (protocol version 3). */
export interface Uplink {
  addresses: string[];
  /** 0: unknown. */
  mtu: number;
}

/** The outcome of making the kernel match one fabric object: what its ack says. */
export interface FabricOutcome {
  code: 'ok' | 'invalid' | 'failed';
  message: string;
}

/** One fabric object that changed: just upserted, or deleted (then absent from the table). */
export interface FabricChange {
  name: string;
  /** Its kind (for a deleted object, the kind it had). */
  kind: string | undefined;
}

/** The fabric half of a dataplane (protocol version 3, feature "fabric-vxlan"). */
export interface FabricDataplane {
  /** The uplink to announce, read now (an address may change while the agent runs). */
  uplink(): Promise<Uplink>;
  /**
   * Makes the dataplane match `table` for the objects that changed and for whatever depends on them,
   * all together (a snapshot's burst costs a few kernel round trips, not one per entry); one outcome
   * per change, in order, each about that object alone.
   */
  apply(table: FabricTable, changes: readonly FabricChange[]): Promise<FabricOutcome[]>;
  /** Removes objects of ours that no object of `table` wants (after a complete snapshot). */
  prune(table: FabricTable): Promise<void>;
  /**
   * One PeerState per FabricPeer of the table. `fresh`: read the kernel again now (the heartbeat);
   * otherwise the dataplane may answer from what it read last and what it has programmed since.
   */
  peerStates(table: FabricTable, fresh: boolean): Promise<PeerState[]>;
  /**
   * Tells `listener` of an object refused earlier for what another object held, programmed (or
   * refused anew) once that one let go, outside the change that brought it: its ack must go again.
   */
  onHeldApplied?(listener: (name: string, outcome: FabricOutcome) => void): void;
}

export interface Dataplane {
  /** Capability features this dataplane adds to the hello. */
  readonly features: string[];
  /** Present when the dataplane can carry the fabric. */
  readonly fabric?: FabricDataplane;
  /** Present when the dataplane enforces NetworkPolicy (protocol version 4, netns mode). */
  readonly policy?: PolicyEnforcer;
  /**
   * Makes the port exist as described (idempotent: an existing port is updated to match).
   * Throws with a message for the ack on failure.
   */
  program(port: Port, previous: PortEntry | undefined, vf: VfIdentity): Promise<Programmed>;
  /** Removes a port; succeeds when it is already gone. */
  remove(entry: PortEntry): Promise<void>;
  /** VFs kept from an earlier start (--keep-vfs) whose port has not been programmed again yet. */
  adopted?(): AdoptedVf[];
  /** Removes the kept VFs of ports a whole snapshot did not list; the names of those ports. */
  releaseAdopted?(wanted: ReadonlySet<string>): Promise<string[]>;
  close(): Promise<void>;
}

export class NoDataplane implements Dataplane {
  readonly features: string[] = [];
  constructor(readonly fabric?: FabricDataplane) {}
  async program(): Promise<Programmed> {
    return {};
  }
  async remove(): Promise<void> {}
  async close(): Promise<void> {}
}
