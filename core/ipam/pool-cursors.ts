import { knownWorkloadNetError } from '../errors';
import type { IpPool } from './ip-pool';

// The pools' round-robin cursors as the store keeps them, keyed by canonical CIDR, so that round-robin
// survives a restart. Their own file because they are a persisted hint with its own tolerance: entries
// that no longer fit are dropped, never a reason to fail start-up, unlike the addresses themselves.

/** Each pool's cursor, and each slice's of a cut pool under the slice's CIDR. */
export function poolCursors(pools: readonly IpPool[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pools) {
    const c = p.cursor;
    if (c !== undefined) out[p.cidr.text] = c;
    // A cut pool's slices keep theirs under the slice's CIDR (never a pool's: pools do not overlap).
    for (let i = 0; p.sliceCount > 1 && i < p.sliceCount; i++) {
      const sc = p.sliceCursor(i);
      if (sc !== undefined) out[p.sliceCidr(i) as string] = sc;
    }
  }
  return out;
}

/**
 * Restores cursors saved by poolCursors(). A cursor is only a fairness hint, so entries for pools that
 * are no longer configured, or that no longer fit their pool, are dropped instead of failing start-up.
 */
export function restorePoolCursors(pools: readonly IpPool[], cursors: Record<string, string>): void {
  for (const p of pools) {
    for (let i = 0; p.sliceCount > 1 && i < p.sliceCount; i++) {
      const sc = cursors[p.sliceCidr(i) as string];
      if (sc !== undefined) p.setSliceCursor(i, sc);
    }
    const c = cursors[p.cidr.text];
    if (c === undefined) continue;
    try {
      p.setCursor(c);
    } catch (err) {
      if (!knownWorkloadNetError(err)) throw err;
    }
  }
}
