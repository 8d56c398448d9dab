import type { Vtep } from './peer-source';

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
  return { mac: t.mac, vni: t.vni as number, port: t.port as number };
}
