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
}

const KEYS = {
  port: 'dpuPort',
  generation: 'dpuGeneration',
  mac: 'dpuMac',
  endpoint: 'dpuEndpoint',
  agentId: 'dpuAgentId',
  bootId: 'dpuBootId',
} as const;

export function encodeDetails(d: DpuDetails): Record<string, string | number | boolean> {
  return {
    [KEYS.port]: d.port,
    [KEYS.generation]: d.generation,
    [KEYS.mac]: d.mac,
    [KEYS.endpoint]: d.endpoint,
    [KEYS.agentId]: d.agentId,
    [KEYS.bootId]: d.bootId,
  };
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
  };
}
