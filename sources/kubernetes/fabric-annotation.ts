import { decodeEndpoints, encodeEndpoints } from '../../core/fabric/endpoint-fields';
import { decodeVtep } from '../../core/fabric/vtep-fields';
import type { NodeRecord, TunnelEndpoint, Vtep } from '../../core/peer-source';

// What a node adds to its own Node object for the fabric: the fields of its record the Node does not
// already say (its name and underlay addresses are the Node's own; its prefixes are spec.podCIDRs).
// JSON in one annotation, written by the node's daemon and read by every other. Other nodes'
// annotations are untrusted input: one that does not parse is refused whole, never half-used.

export const FABRIC_ANNOTATION = 'workloadnet.io/fabric';

/** The annotation's content: how to tunnel to the node (and to its DPUs) and its uplink MTU. */
export interface FabricAnnotation {
  mtu: number;
  vtep?: Vtep;
  bootId: string;
  /** Its DPUs, each with slices of the podCIDRs; absent on a node without any. */
  endpoints?: TunnelEndpoint[];
}

const KEYS = new Set(['mtu', 'vtep', 'bootId', 'endpoints']);

export function encodeAnnotation(r: NodeRecord): string {
  const out: FabricAnnotation = { mtu: r.mtu, bootId: r.bootId };
  if (r.vtep) out.vtep = { mac: r.vtep.mac, vni: r.vtep.vni, port: r.vtep.port };
  // Only when there are some: a node without DPUs writes the annotation it always wrote.
  if (r.endpoints && r.endpoints.length > 0) out.endpoints = encodeEndpoints(r.endpoints);
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
  if (o.vtep !== undefined) out.vtep = decodeVtep(o.vtep);
  if (o.endpoints !== undefined)
    try {
      out.endpoints = decodeEndpoints(o.endpoints);
    } catch (err) {
      throw new Error(`has an invalid endpoint list: ${(err as Error).message}`);
    }
  return out;
}
