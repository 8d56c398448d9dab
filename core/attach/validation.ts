import { attachmentKey, type AttachmentKey } from '../attachment-key';
import { DEFAULT_NETWORK } from '../config';
import { invalidArgument } from '../errors';
import type { DpuPortOptions } from '../backend';
import { validateDpuPort } from '../dpu-port-options';
import type { AttachCall, DnsInfo, PodMetadata } from '../workload-service';

// Input rules shared by every entry point (gRPC, CNI). They run before any state changes, so a rejected
// call has nothing to roll back.

const WORKLOAD_ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]*$/;
export const MAX_WORKLOAD_ID = 256;
const MAX_METADATA = 1024;

export function validateWorkloadId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0) throw invalidArgument('workload id is required');
  if (id.length > MAX_WORKLOAD_ID) {
    throw invalidArgument(`workload id is ${id.length} bytes long; at most ${MAX_WORKLOAD_ID} are allowed`);
  }
  if (!WORKLOAD_ID.test(id)) {
    throw invalidArgument(
      `workload id ${JSON.stringify(id.slice(0, 64))} may only contain letters, digits, "_", ".", ":" and "-", and must start with a letter or digit`,
    );
  }
  return id;
}

/** Linux interface names: 1-15 bytes (IFNAMSIZ-1), no '/', ':' or whitespace, not "." or "..". */
export function validateIfName(name: unknown): string {
  if (typeof name !== 'string' || name.length === 0) throw invalidArgument('interface name is required');
  const bytes = Buffer.byteLength(name);
  if (bytes > 15)
    throw invalidArgument(
      `interface name ${JSON.stringify(name)} is ${bytes} bytes; Linux allows at most 15`,
    );
  if (/[/:\s\0]/.test(name) || name === '.' || name === '..') {
    throw invalidArgument(`interface name ${JSON.stringify(name)} must not contain "/", ":" or whitespace`);
  }
  return name;
}

export function validateMtu(mtu: unknown): number {
  if (typeof mtu !== 'number' || !Number.isInteger(mtu) || mtu < 68 || mtu > 65535) {
    throw invalidArgument(`mtu ${String(mtu)} is out of range; use 68..65535`);
  }
  return mtu;
}

export function validateMetadata(field: string, value: unknown): string | undefined {
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string') throw invalidArgument(`${field} must be a string`);
  if (value.length > MAX_METADATA)
    throw invalidArgument(`${field} is longer than ${MAX_METADATA} characters`);
  if (value.includes('\0')) throw invalidArgument(`${field} contains a NUL byte`);
  return value;
}

/** An Attach call after validation: every field checked, defaults filled in. */
export interface AttachRequest {
  workloadId: string;
  ifName: string;
  /** The network the interface joins (DEFAULT_NETWORK when the call names none). */
  network: string;
  key: AttachmentKey;
  netnsPath: string;
  /** The MTU the call asks for; absent: its network's (which may follow the fabric's, see Network.mtu). */
  mtu?: number;
  pod?: PodMetadata;
  containerId?: string;
  dns?: DnsInfo;
  origin: string;
  /** The DPU agent the caller asked for; placement chooses when unset. */
  dpu?: string;
  dpuPort?: DpuPortOptions;
}

/** The interface a workload gets when the caller names none. */
export const DEFAULT_IF_NAME = 'eth0';

/** A network name as a call gives it; undefined when it gives none. Whether it exists is the core's. */
export function validateNetworkName(name: unknown): string | undefined {
  if (name === undefined || name === '') return undefined;
  if (typeof name !== 'string' || name.length > 64 || !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name))
    throw invalidArgument(
      `network name ${JSON.stringify(String(name).slice(0, 64))} must be 1-64 letters, digits, "_", "." and "-", starting with a letter or digit`,
    );
  return name;
}

/** Checks every field of an Attach call; the namespace path itself is checked when it is opened. */
export function validateAttach(call: AttachCall): AttachRequest {
  const workloadId = validateWorkloadId(call.workloadId);
  const ifName = validateIfName(call.ifName || DEFAULT_IF_NAME);
  const pod = {
    uid: validateMetadata('pod uid', call.pod?.uid),
    namespace: validateMetadata('pod namespace', call.pod?.namespace),
    name: validateMetadata('pod name', call.pod?.name),
  };
  return {
    workloadId,
    ifName,
    network: validateNetworkName(call.network) ?? DEFAULT_NETWORK,
    key: attachmentKey(workloadId, ifName),
    netnsPath: call.netnsPath,
    mtu: call.mtu ? validateMtu(call.mtu) : undefined,
    pod: pod.uid || pod.namespace || pod.name ? pod : undefined,
    containerId: validateMetadata('container id', call.containerId),
    dns: call.dns,
    origin: call.origin ?? 'api',
    dpu: validateDpuId(call.dpu),
    dpuPort: validateDpuPort(call.dpuPort),
  };
}

/** A DPU agent id as agents send it in their hello: 1-253 printable ASCII characters, no spaces. */
export function validateDpuId(value: unknown): string | undefined {
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string' || value.length > 253 || !/^[\x21-\x7e]+$/.test(value))
    throw invalidArgument(
      `dpu must be a DPU agent id (1-253 printable characters without spaces), got ${JSON.stringify(String(value).slice(0, 64))}`,
    );
  return value;
}
