import { randomUUID } from 'node:crypto';

// Which store this is: a random id, the node that created it and when, recorded once. Its own file
// because other parts compare identities (the store check, a pool source that tells a new store from a
// restored one) without needing the store itself.

/** Meta key of the store's identity. */
export const IDENTITY_KEY = 'identity';

/** Who created a store, recorded once when it is created, so that a new store is recognisable. */
export interface StoreIdentity {
  /** Random id of this store; a store restored from a backup keeps it, a new one never shares it. */
  storeId: string;
  /** Node (host) name that created the store. */
  node: string;
  /** ISO time of creation (for a store older than identities: when its identity was first recorded). */
  createdAt: string;
}

/** A new store's identity, created on `node` now. */
export function newIdentity(node: string): StoreIdentity {
  return { storeId: randomUUID(), node, createdAt: new Date().toISOString() };
}

/** The identity as read back, or undefined when what was read is not one. */
export function asIdentity(v: unknown): StoreIdentity | undefined {
  if (!v || typeof v !== 'object') return undefined;
  const { storeId, node, createdAt } = v as Record<string, unknown>;
  if (typeof storeId !== 'string' || typeof node !== 'string' || typeof createdAt !== 'string')
    return undefined;
  return { storeId, node, createdAt };
}
