import type { Attachment } from '../workload-service';
import type { AllocatedIp } from './ip-allocator';
import type { PoolSupply } from './pool-supply';

// Where the address of a port placed on a tunnel endpoint (a DPU) comes from, as the networks, the
// attach flow and the start-up reconcile ask it. The fabric decides it (core/fabric/slice-book.ts: an
// endpoint's slices, its own pools, or a borrowed address announced as its own), because other nodes
// route each endpoint's prefixes to its VTEP; the address management only applies the answer.

/** A stored attachment as the placement reads it (core/store/attachment-record.ts has these fields). */
export type PlacedRow = Pick<Attachment, 'ips' | 'network' | 'dataplane'> & {
  /** The endpoint the backend placed the port on; "" for a place that is no endpoint. */
  endpoint?: string;
};

export interface PlacedAddresses {
  /** Reads the stored placement, before the stored attachments' addresses are held again. */
  load(rows: Iterable<PlacedRow>): Promise<void>;
  /** A stored attachment's addresses, once held again. */
  restored(rec: PlacedRow): void;
  /** Every stored attachment is held again: the placement is whole. */
  restoredAll(): void;
  /** One address per family for a port placed on `endpoint`, from the network's supply. */
  allocate(supply: PoolSupply, endpoint: string): Promise<AllocatedIp[]>;
  /** Addresses given back (a detach, or an attach rolled back). */
  released(addresses: readonly string[]): void;
}
