// What the fabric keeps in the store's meta database besides the attachment rows: the cut of the
// node's ranges among its tunnel endpoints, the node's tunnel addresses, and the DPU fabric's identity
// holders per agent. Their own file because each is a node-level record with its own shape and its
// own check of what was read back, which the store only carries: its transactions do not depend on
// them, and the fabric's records change without touching how rows are written.

/**
 * How the node's ranges are cut among its tunnel endpoints (core/fabric/slice-book.ts): the slice count
 * the ranges were cut with, and each endpoint's slice index. Kept so that a restart gives every DPU the
 * slices it had: its pods' addresses stay routed to it.
 */
export interface StoredSlices {
  count: number;
  /** Endpoint (DPU agent) id → slice index. */
  endpoints: Record<string, number>;
}

/** This node's fabric tunnel address per family, reserved from its own pools. */
export interface StoredTunnelAddresses {
  4?: string;
  6?: string;
}

/** Meta key of the StoredSlices. */
export const FABRIC_SLICES_KEY = 'fabricSlices';
/** Meta key of this node's fabric tunnel addresses (core/fabric/tunnel-addresses.ts). */
export const TUNNEL_ADDRESSES_KEY = 'fabricTunnelAddresses';
/** Meta key prefix: a DPU agent id after it → that agent's fabric identity holders. */
const FABRIC_HOLDERS_PREFIX = 'dpuFabricHolders/';

/** Meta key of one agent's fabric identity holders. */
export function fabricHoldersKey(agentId: string): string {
  return `${FABRIC_HOLDERS_PREFIX}${agentId}`;
}

/** The stored cut as read back, or undefined when what was read is not one. */
export function asStoredSlices(v: unknown): StoredSlices | undefined {
  if (!v || typeof v !== 'object') return undefined;
  const { count, endpoints } = v as Record<string, unknown>;
  if (typeof count !== 'number' || !endpoints || typeof endpoints !== 'object') return undefined;
  const out: Record<string, number> = {};
  for (const [id, i] of Object.entries(endpoints as Record<string, unknown>))
    if (typeof i === 'number' && Number.isInteger(i) && i >= 0) out[id] = i;
  return { count, endpoints: out };
}

/** The tunnel addresses as read back: the families that hold a string (empty when none). */
export function asStoredTunnelAddresses(v: unknown): StoredTunnelAddresses {
  if (!v || typeof v !== 'object') return {};
  const out: StoredTunnelAddresses = {};
  for (const f of [4, 6] as const) {
    const a = (v as Record<string, unknown>)[f];
    if (typeof a === 'string') out[f] = a;
  }
  return out;
}
