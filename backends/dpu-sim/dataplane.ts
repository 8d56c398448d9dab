import type { Endpoint, Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { PortEntry } from './port-table';
import type { VfIdentity } from './vf-pool';

// What the simulator does to "program" a port. The default does nothing but remember it (a pure
// control-plane agent); the netns dataplane plumbs real interfaces.

export interface Programmed {
  /** The host-side netdev, when the dataplane exposes one. */
  endpoint?: Endpoint;
  /** The DPU-side interface the port's traffic enters by. */
  representor?: string;
}

export interface Dataplane {
  /** Capability features this dataplane adds to the hello. */
  readonly features: string[];
  /**
   * Makes the port exist as described (idempotent: an existing port is updated to match).
   * Throws with a message for the ack on failure.
   */
  program(port: Port, previous: PortEntry | undefined, vf: VfIdentity): Promise<Programmed>;
  /** Removes a port; succeeds when it is already gone. */
  remove(entry: PortEntry): Promise<void>;
  close(): Promise<void>;
}

export class NoDataplane implements Dataplane {
  readonly features: string[] = [];
  async program(): Promise<Programmed> {
    return {};
  }
  async remove(): Promise<void> {}
  async close(): Promise<void> {}
}
