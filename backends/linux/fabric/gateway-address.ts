// This node's gateway keys (plan/gateway-keys.ts, ownGatewayKeys) as addresses on our VXLAN device, one /32
// or /128 per family. Without them, traffic the node itself sends to a remote pod takes the uplink's
// address as its source; the peer receives it on its VXLAN device but routes that source back through
// its uplink, so strict rp_filter (=1) drops it. With them the source is an address the peer routes
// through its device, and the peer's kernel answers probes sent to its own key.
//
// The device is ours, so every global address on it is ours: one that is not a key now (the prefix
// went, or was never ours) is removed. Link-local addresses the kernel gives the device stay.

import type { NetlinkError, NetlinkSocket, AddressFamily } from '../../../lib/rtnetlink';
import {
  AF_INET,
  IFA_F_NODAD,
  RT_SCOPE_UNIVERSE,
  canonicalAddress,
  delAddressRequest,
  listAddresses,
  newAddressRequest,
} from '../../../lib/rtnetlink';

export interface GatewayAddressOutcome {
  added: string[];
  removed: string[];
  /** The keys on the device now. */
  held: string[];
  failures: Array<{ what: string; error: NetlinkError }>;
}

/** Makes the device hold exactly `keys` (per family at most one) among its global addresses. */
export async function syncGatewayAddresses(
  sock: NetlinkSocket,
  index: number,
  keys: Partial<Record<AddressFamily, string>>,
): Promise<GatewayAddressOutcome> {
  const wanted = new Map<string, AddressFamily>();
  for (const [f, a] of Object.entries(keys))
    if (a !== undefined) wanted.set(canonicalAddress(a), Number(f) as AddressFamily);
  const have = (await listAddresses(sock, { index })).filter((a) => a.scope === RT_SCOPE_UNIVERSE);
  const spec = (address: string, family: AddressFamily): Parameters<typeof newAddressRequest>[0] => ({
    index,
    address,
    prefixLength: family === AF_INET ? 32 : 128,
    // An IPv6 key is usable at once, not after duplicate address detection; no other node holds it.
    ...(family === AF_INET ? {} : { flags: IFA_F_NODAD }),
  });
  const stale = have.filter((a) => {
    const f = wanted.get(a.address);
    return f === undefined || a.prefixLength !== (f === AF_INET ? 32 : 128);
  });
  const present = new Set(have.filter((a) => !stale.includes(a)).map((a) => a.address));
  const missing = [...wanted].filter(([a]) => !present.has(a));
  const out: GatewayAddressOutcome = { added: [], removed: [], held: [...present], failures: [] };
  // Added first: the kernel flushes a device's IPv4 routes and neighbours when its last IPv4 address
  // goes, so a key that moves (a lower range claimed) must never leave the device without one. The
  // caller syncs the keys before it reads and diffs the routes, so a flush is put back in the same pass.
  const adds =
    missing.length === 0
      ? []
      : await sock.batch(missing.map(([a, f]) => newAddressRequest(spec(a, f), { replace: true })));
  adds.forEach((o, i) => {
    const m = missing[i];
    if (!m) return;
    if (!o.ok) return void out.failures.push({ what: `add address ${m[0]}`, error: o.error });
    out.added.push(m[0]);
    out.held.push(m[0]);
  });
  const dels =
    stale.length === 0
      ? []
      : await sock.batch(
          stale.map((a) => delAddressRequest({ index, address: a.address, prefixLength: a.prefixLength })),
        );
  dels.forEach((o, i) => {
    const a = stale[i];
    if (!a) return;
    if (o.ok || o.error.notFound) out.removed.push(`${a.address}/${a.prefixLength}`);
    else out.failures.push({ what: `remove address ${a.address}/${a.prefixLength}`, error: o.error });
  });
  return out;
}
