import type { NodeRecord, Vtep } from '../../core/fabric/peer-source';

// What a node adds to its own Node object for the fabric: the fields of its record the Node does not
// already say (its name and underlay addresses are the Node's own; its prefixes are spec.podCIDRs).
// JSON in one annotation, written by the node's daemon and read by every other. Other nodes'
// annotations are untrusted input: one that does not parse is refused whole, never half-used.

export const FABRIC_ANNOTATION = 'workloadnet.io/fabric';

/** The annotation's content: how to tunnel to the node and its uplink MTU. */
export interface FabricAnnotation {
  mtu: number;
  vtep?: Vtep;
  bootId: string;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
const KEYS = new Set(['mtu', 'vtep', 'bootId']);

export function encodeAnnotation(r: NodeRecord): string {
  const out: FabricAnnotation = { mtu: r.mtu, bootId: r.bootId };
  if (r.vtep) out.vtep = { mac: r.vtep.mac, vni: r.vtep.vni, port: r.vtep.port };
  return JSON.stringify(out);
}

/** Parses an annotation's text; throws an Error whose message completes "the annotation …". */
export function decodeAnnotation(text: string): FabricAnnotation {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error('is not JSON');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('is not a JSON object');
  const o = v as Record<string, unknown>;
  const unknown = Object.keys(o).filter((k) => !KEYS.has(k));
  if (unknown.length > 0) throw new Error(`has unknown field ${JSON.stringify(unknown[0])}`);
  if (!Number.isInteger(o.mtu) || (o.mtu as number) < 576 || (o.mtu as number) > 65535)
    throw new Error(`has MTU ${JSON.stringify(o.mtu)}, not a number 576-65535`);
  if (o.bootId !== undefined && typeof o.bootId !== 'string')
    throw new Error('has a "bootId" that is not text');
  const out: FabricAnnotation = { mtu: o.mtu as number, bootId: (o.bootId as string | undefined) ?? '' };
  if (o.vtep !== undefined) {
    const t = o.vtep as Record<string, unknown> | null;
    if (!t || typeof t !== 'object' || Array.isArray(t))
      throw new Error('has a "vtep" that is not an object');
    if (typeof t.mac !== 'string' || !MAC.test(t.mac))
      throw new Error(`has VTEP MAC ${JSON.stringify(t.mac)}, not six lowercase hex bytes`);
    if (!Number.isInteger(t.vni) || (t.vni as number) < 1 || (t.vni as number) > 0xffffff)
      throw new Error(`has VNI ${JSON.stringify(t.vni)}, not a number 1-16777215`);
    if (!Number.isInteger(t.port) || (t.port as number) < 1 || (t.port as number) > 65535)
      throw new Error(`has VTEP port ${JSON.stringify(t.port)}, not a number 1-65535`);
    out.vtep = { mac: t.mac, vni: t.vni as number, port: t.port as number };
  }
  return out;
}
