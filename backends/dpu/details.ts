import type { DataplaneResult } from '../../core/backend';

// What the DPU backend stores in DataplaneResult.details. The core persists it verbatim and hands it
// back in AttachmentView, which is how desired state (generations, MACs, endpoints) survives a daemon
// restart without the backend owning a store of its own.

export interface DpuDetails {
  /** Port name on the agent (the attachment key). */
  port: string;
  /** Generation the agent acknowledged. */
  generation: number;
  mac: string;
  /** Netdev the agent reported as the port's host end; empty when the agent programs no host side. */
  endpoint: string;
  agentId: string;
  bootId: string;
  /** Which VF the endpoint is, when the agent said (protocol version 2); stable across reboots. */
  pf?: number;
  vf?: number;
  pciAddress?: string;
  representor?: string;
  /** The endpoint's index in the workload namespace once moved there (Detach moves out that link). */
  ifIndex?: number;
  /** The port's VF settings (rates, spoof check, trust, link state, PF), as JSON; empty for none. */
  portOptions?: string;
}

const KEYS = {
  port: 'dpuPort',
  generation: 'dpuGeneration',
  mac: 'dpuMac',
  endpoint: 'dpuEndpoint',
  agentId: 'dpuAgentId',
  bootId: 'dpuBootId',
  pf: 'dpuPf',
  vf: 'dpuVf',
  pciAddress: 'dpuPci',
  representor: 'dpuRepresentor',
  ifIndex: 'dpuIfIndex',
  portOptions: 'dpuPortOptions',
} as const;

export function encodeDetails(d: DpuDetails): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {
    [KEYS.port]: d.port,
    [KEYS.generation]: d.generation,
    [KEYS.mac]: d.mac,
    [KEYS.endpoint]: d.endpoint,
    [KEYS.agentId]: d.agentId,
    [KEYS.bootId]: d.bootId,
  };
  // Version 1 agents say nothing of these; their attachments keep the keys they always had.
  if (d.pf !== undefined) out[KEYS.pf] = d.pf;
  if (d.vf !== undefined) out[KEYS.vf] = d.vf;
  if (d.pciAddress) out[KEYS.pciAddress] = d.pciAddress;
  if (d.representor) out[KEYS.representor] = d.representor;
  if (d.ifIndex) out[KEYS.ifIndex] = d.ifIndex;
  if (d.portOptions) out[KEYS.portOptions] = d.portOptions;
  return out;
}

/** The stored details, or undefined when they are missing or not ours (an attachment made by another backend). */
export function decodeDetails(dp: DataplaneResult | undefined): DpuDetails | undefined {
  const d = dp?.details;
  if (!d) return undefined;
  const port = d[KEYS.port];
  const generation = d[KEYS.generation];
  if (typeof port !== 'string' || typeof generation !== 'number' || !Number.isSafeInteger(generation))
    return undefined;
  const str = (k: string): string => {
    const v = d[k];
    return typeof v === 'string' ? v : '';
  };
  return {
    port,
    generation,
    mac: str(KEYS.mac),
    endpoint: str(KEYS.endpoint),
    agentId: str(KEYS.agentId),
    bootId: str(KEYS.bootId),
    pf: index(d[KEYS.pf]),
    vf: index(d[KEYS.vf]),
    pciAddress: str(KEYS.pciAddress),
    representor: str(KEYS.representor),
    ifIndex: index(d[KEYS.ifIndex]),
    portOptions: str(KEYS.portOptions),
  };
}

function index(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}
