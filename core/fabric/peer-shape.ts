import type { Peer } from '../peer-source';

// A peer record's shape: two records of one shape program the same objects. Sources hand out the same
// object for a peer that did not change (etcd's and Kubernetes' tables copy on change, the peers file
// keeps the record of an entry it read before), so at 5,000 peers most comparisons are by identity and
// this text is made once per record, not once per record per apply.

const shapes = new WeakMap<Peer, string>();

export function peerShape(peer: Peer): string {
  let s = shapes.get(peer);
  if (s === undefined) {
    s = JSON.stringify(peer);
    shapes.set(peer, s);
  }
  return s;
}

/** Whether two records program the same objects: the same record, or one of the same shape. */
export function samePeer(a: Peer | undefined, b: Peer | undefined): boolean {
  if (a === b) return true;
  return a !== undefined && b !== undefined && peerShape(a) === peerShape(b);
}
