import { unavailable } from '../../core/errors';
import { blockAt, blockIndex, startIndex, type BlockLayout } from './block-layout';
import { describeOwner, type BlockOwner } from './block-owner';
import type { BlockRegistry } from './block-registry';

// Finding and claiming one free block: read who owns what, then try free blocks one after another from
// the node's own starting point, each with a compare-and-create transaction. A lost race (another node
// created the key between our read and our transaction) just moves on to the next free block. A block
// claimed for one DPU of the node is claimed the same way, with the DPU in the key's value; its start
// is hashed from node and DPU, so a node's DPUs claiming at once do not race each other either.

/** Compare-and-create attempts before giving up on one claim (then the caller retries later). */
const MAX_ATTEMPTS = 16;

export type ClaimResult = { block: string; attempts: number } | { full: true; attempts: number };

export async function claimBlock(
  registry: BlockRegistry,
  layout: BlockLayout,
  owner: string | BlockOwner,
): Promise<ClaimResult> {
  const who = typeof owner === 'string' ? { node: owner } : owner;
  const taken = new Set<bigint>();
  for (const block of (await registry.blocks()).keys()) {
    const i = blockIndex(layout, block);
    if (i !== undefined) taken.add(i);
  }
  if (BigInt(taken.size) >= layout.count) return { full: true, attempts: 0 };
  const start = startIndex(layout, describeOwner(who));
  let attempts = 0;
  // Walk at most once around the range; taken.size < count, so a free index exists.
  for (let step = 0n; step < layout.count && attempts < MAX_ATTEMPTS; step++) {
    const i = (start + step) % layout.count;
    if (taken.has(i)) continue;
    const block = blockAt(layout, i);
    attempts++;
    if (await registry.create(block, who)) return { block, attempts };
    taken.add(i);
  }
  if (BigInt(taken.size) >= layout.count) return { full: true, attempts };
  throw unavailable(
    `could not claim an address block of ${layout.cluster.text}: lost ${attempts} races to other nodes; retrying`,
  );
}
