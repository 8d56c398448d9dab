// What the store records about the reconciles that vouched for its rows: the kernel boot of the last
// one, whether the first one has finished (until then the store is new), and the DPU agents it has
// finished a first full sync with. Their own file because they decide whether the rows are trusted
// against the dataplane (core/reconcile/), a concept apart from reading and writing the rows.

/**
 * Meta key: the kernel boot in which a start-up reconcile last finished. Every row in the store was
 * written in that boot or an earlier one, since a daemon serves only after its reconcile.
 */
export const RECONCILED_BOOT_KEY = 'reconciledBoot';

/**
 * Meta key present from the transaction that creates a store until the one that records its first
 * reconcile (with the rows it adopted): while it is there, the store is new.
 */
export const NEW_UNTIL_RECONCILED_KEY = 'newUntilReconciled';

/**
 * Meta key: DPU agent id → when this store finished its first full sync with it. Created empty with a
 * new store (with the first reconcile's record); a store without it predates it.
 */
export const ADOPTED_AGENTS_KEY = 'adoptedAgents';

/**
 * Whether the boot of the last reconcile, as read back, is an earlier one than `bootId`: false when
 * either is unknown.
 */
export function isEarlierBoot(last: unknown, bootId: string): boolean {
  return typeof last === 'string' && last !== '' && bootId !== '' && last !== bootId;
}

/**
 * The adopted agents as read back, or 'all' for a store that predates the record (a new store has
 * adopted none).
 */
export function asAdoptedAgents(v: unknown, isNew: boolean): ReadonlySet<string> | 'all' {
  if (!v || typeof v !== 'object') return isNew ? new Set() : 'all';
  return new Set(Object.keys(v as Record<string, unknown>));
}

/** The record read back with `agentId` added now, or undefined when it is there already. */
export function withAdoptedAgent(v: unknown, agentId: string): Record<string, string> | undefined {
  const record = v && typeof v === 'object' ? { ...(v as Record<string, string>) } : {};
  if (record[agentId] !== undefined) return undefined;
  record[agentId] = new Date().toISOString();
  return record;
}
