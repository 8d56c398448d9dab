import type { Attachment } from '../workload-service';

// The attachment row as the store keeps it: the public view plus what only the daemon needs, and the
// key under which its encoding's shared structures live. Its own file because every room that settles
// rows against the world (attach, reconcile, the host port, the slice book) reads this shape without
// needing the store that holds it.

/** A stored attachment: the public view plus what only the daemon needs. */
export interface AttachmentRecord extends Attachment {
  /** Inode of the workload namespace when it was attached (detects a re-created namespace). */
  netnsInode: number;
  /**
   * Device of the directory the namespace path was found in at attach (absent in rows written before
   * it was recorded): the leak sweep trusts a path's absence only on that same mount (sweep-guard.ts).
   */
  netnsDirDev?: number;
  /**
   * The tunnel endpoint (DPU agent id) the backend's place() chose before the address was allocated:
   * whose slice the address came from, or who borrowed it (core/fabric/slice-book.ts); "" when the place
   * is no endpoint (a DPU that does not carry the fabric).
   */
  endpoint?: string;
  /**
   * The Attach call asked for this MTU (absent: it is the network's, which an interface follows when
   * it changes, see core/reconcile/mtu-alignment.ts).
   */
  mtuAsked?: boolean;
  /**
   * Written with the row while its dataplane is being programmed, and gone from the row that records
   * the backend's answer: a row that still has it at start-up is an attach cut short, whose caller was
   * told it failed (core/reconcile/cut-short.ts). Absent in every row older builds wrote: finished.
   */
  unfinished?: boolean;
}

/**
 * Key under which the attachments database keeps the msgpack record structures (the property names of
 * each object shape) that its rows refer to. Without it every row carries its own property names, near
 * doubling its size, and decoding a row builds its structures afresh, so reading every row (List,
 * start-up) allocates and costs several times as much (docs/benchmarks.md). lmdb writes a new
 * structure in the same transaction as the first row that uses it.
 */
export const SHARED_STRUCTURES_KEY = Symbol.for('structures');
