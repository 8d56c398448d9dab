import { parseAddress } from '../../lib/cidr';
import type { Vtep } from '../peer-source';

// A VTEP as a cluster source stores it beside a node (an etcd record, a Node annotation): read from
// JSON another daemon wrote, so checked field by field. The messages complete "the record …" or "the
// annotation …" in the caller's report.

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** The stored VTEP, checked; throws an Error saying what is wrong with it. */
export function decodeVtep(value: unknown): Vtep {
  const t = value as Record<string, unknown> | null;
  if (!t || typeof t !== 'object' || Array.isArray(t)) throw new Error('has a "vtep" that is not an object');
  if (typeof t.mac !== 'string' || !MAC.test(t.mac))
    throw new Error(`has VTEP MAC ${JSON.stringify(t.mac)}, not six lowercase hex bytes`);
  if (!Number.isInteger(t.vni) || (t.vni as number) < 1 || (t.vni as number) > 0xffffff)
    throw new Error(`has VNI ${JSON.stringify(t.vni)}, not a number 1-16777215`);
  if (!Number.isInteger(t.port) || (t.port as number) < 1 || (t.port as number) > 65535)
    throw new Error(`has VTEP port ${JSON.stringify(t.port)}, not a number 1-65535`);
  const vtep: Vtep = { mac: t.mac, vni: t.vni as number, port: t.port as number };
  if (t.gateways !== undefined) vtep.gateways = decodeGateways(t.gateways);
  return vtep;
}

/** The tunnel addresses: an object of "4" and/or "6", each a single address of that family. */
function decodeGateways(value: unknown): NonNullable<Vtep['gateways']> {
  if (!value || typeof value !== 'object' || Array.isArray(value))
    throw new Error(`has VTEP gateways ${JSON.stringify(value)}, not an object of "4" and "6" addresses`);
  const out: NonNullable<Vtep['gateways']> = {};
  for (const [k, a] of Object.entries(value as Record<string, unknown>)) {
    if (k !== '4' && k !== '6')
      throw new Error(`has a VTEP gateway for family ${JSON.stringify(k)}, not "4" or "6"`);
    let family: number | undefined;
    try {
      family = typeof a === 'string' && !a.includes('/') ? parseAddress(a).family : undefined;
    } catch {
      family = undefined;
    }
    if (family !== Number(k))
      throw new Error(`has VTEP gateway ${JSON.stringify(a)} for family ${k}, not an IPv${k} address`);
    out[Number(k) as 4 | 6] = a as string;
  }
  return out;
}
