import { cidrContains, parseAddress, parseCidr, type Cidr } from '../lib/cidr';
import type { FabricMode } from './fabric-dataplane';

// The fabric's part of the configuration check (core/daemon/config-check.ts runs it with the rest): its mode,
// underlay, VXLAN and peer-source options, and how the DPUs' slices are cut.

/** Largest slice count accepted (dpu.fabricSlices): more slices than that is more routes than DPUs. */
export const MAX_SLICES = 256;

/** Whether `n` is a valid slice count: a power of two in 1..MAX_SLICES. */
export function isSliceCount(n: unknown): n is number {
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= MAX_SLICES && (n & (n - 1)) === 0;
}

/** The `fabric` options of the configuration (core/config.ts). */
export interface FabricConfig {
  /** off, routed, vxlan, hybrid, external; auto: off with the static pool source, hybrid with a cluster one. */
  mode: FabricMode | 'auto';
  /** The node's underlay address; empty = the address of the interface holding the default route. */
  nodeIp: string;
  vni: number;
  /** VXLAN UDP port. */
  port: number;
  /** The static peer source's file of peers; empty = no peers. */
  peersFile: string;
  /** etcd peer source: TTL of the lease this node's record lives on. */
  leaseTtlSeconds: number;
  /** How long a peer that left its source stays programmed (it may only have lost its lease). */
  withdrawGraceSeconds: number;
  /** Seconds between two data-path probes of each peer; 0 = no probes. */
  probeIntervalSeconds: number;
  /** A DPU whose slices are full gets no address rather than a borrowed one. */
  strictSlices: boolean;
  /** VXLAN only from the peers' underlay addresses (an nftables table of ours); false: from anyone. */
  sourceFilter: boolean;
  /**
   * The cluster's pod ranges, at most one per family, for the static and Kubernetes sources (the etcd
   * source has its own, etcd.clusterCidrs): the host port routes them, and the Linux fabric makes them
   * unreachable rather than sent along the default route. Empty: every range known when the host port
   * was attached, and no catch-all.
   */
  clusterCidrs: string[];
}

/** What the check reads of the configuration. */
interface FabricOptions {
  fabric: FabricConfig;
  poolSource: string;
  dpu: { fabricSlices: number };
  podCidrs: string[];
  networks: ReadonlyArray<{ name?: unknown; podCidrs?: unknown }>;
}

const FABRIC_MODES = ['auto', 'off', 'routed', 'vxlan', 'hybrid', 'external'];

export function validateFabric(c: FabricOptions, fail: (msg: string) => never): void {
  const f = c.fabric;
  if (!FABRIC_MODES.includes(f.mode))
    fail(`fabric.mode must be one of ${FABRIC_MODES.join(', ')}, not "${String(f.mode)}"`);
  if (typeof f.nodeIp !== 'string') fail('fabric.nodeIp must be an address (text) or empty');
  if (f.nodeIp !== '') {
    try {
      parseAddress(f.nodeIp);
    } catch {
      fail(`fabric.nodeIp "${f.nodeIp}" is not an IPv4 or IPv6 address (give the address, no prefix length)`);
    }
  }
  if (!Number.isInteger(f.vni) || f.vni < 1 || f.vni > 0xffffff)
    fail(`fabric.vni must be an integer in 1..16777215, not ${String(f.vni)}`);
  if (!Number.isInteger(f.port) || f.port < 1 || f.port > 65535)
    fail(`fabric.port must be a UDP port in 1..65535, not ${String(f.port)}`);
  if (typeof f.peersFile !== 'string' || (f.peersFile !== '' && !f.peersFile.startsWith('/')))
    fail('fabric.peersFile must be an absolute path or empty');
  // The etcd and Kubernetes sources deliver the peers themselves; a file beside them would be ignored.
  if (f.peersFile !== '' && c.poolSource !== 'static')
    fail(
      `fabric.peersFile is for the static peer source; with poolSource "${c.poolSource}" the peers come from ${c.poolSource === 'etcd' ? 'etcd' : 'the Kubernetes API'}`,
    );
  if (!Number.isInteger(f.leaseTtlSeconds) || f.leaseTtlSeconds < 1 || f.leaseTtlSeconds > 15)
    fail(
      `fabric.leaseTtlSeconds must be an integer in 1..15 (a dead node is withdrawn after it), not ${String(f.leaseTtlSeconds)}`,
    );
  if (
    !Number.isInteger(f.withdrawGraceSeconds) ||
    f.withdrawGraceSeconds < 0 ||
    f.withdrawGraceSeconds > 86400
  )
    fail(`fabric.withdrawGraceSeconds must be an integer in 0..86400, not ${String(f.withdrawGraceSeconds)}`);
  if (
    !Number.isInteger(f.probeIntervalSeconds) ||
    f.probeIntervalSeconds < 0 ||
    f.probeIntervalSeconds > 3600
  )
    fail(
      `fabric.probeIntervalSeconds must be an integer in 0..3600 (0 turns the data-path probes off), not ${String(f.probeIntervalSeconds)}`,
    );
  if (!isSliceCount(c.dpu.fabricSlices))
    fail(
      `dpu.fabricSlices must be a power of two in 1..${MAX_SLICES} (one slice per DPU of the node, e.g. 2, 4 or 8), not ${JSON.stringify(c.dpu.fabricSlices)}`,
    );
  if (typeof f.strictSlices !== 'boolean')
    fail(`fabric.strictSlices must be true or false, not ${JSON.stringify(f.strictSlices)}`);
  if (typeof f.sourceFilter !== 'boolean')
    fail(`fabric.sourceFilter must be true or false, not ${JSON.stringify(f.sourceFilter)}`);
  validateClusterCidrs(c, fail);
}

/**
 * fabric.clusterCidrs: CIDRs, one per family, not beside the etcd source's own, and (static source)
 * holding every range of the node's podCidrs: a range outside would be routed by no cluster range.
 */
function validateClusterCidrs(c: FabricOptions, fail: (msg: string) => never): void {
  const list = c.fabric.clusterCidrs;
  if (!Array.isArray(list) || list.some((x) => typeof x !== 'string'))
    fail('fabric.clusterCidrs must be a list of CIDR strings');
  if (list.length === 0) return;
  if (c.poolSource === 'etcd')
    fail(
      'fabric.clusterCidrs is for the static and kubernetes pool sources; with etcd the cluster ranges are etcd.clusterCidrs',
    );
  const ranges = clusterRanges('fabric.clusterCidrs', list, fail);
  if (c.poolSource !== 'static') return;
  // The default network's ranges: the named one's when networks are configured.
  const own = c.networks.length === 0 ? c.podCidrs : c.networks.find((n) => n?.name === 'default')?.podCidrs;
  for (const text of Array.isArray(own) ? (own as unknown[]) : []) {
    if (typeof text !== 'string') continue; // named by the networks check
    let pod: Cidr;
    try {
      pod = parseCidr(text);
    } catch {
      continue; // named by the podCidrs check
    }
    const cluster = ranges.find((r) => r.family === pod.family);
    if (cluster && !(cluster.prefixLength <= pod.prefixLength && cidrContains(cluster, pod.network)))
      fail(
        `podCidrs ${text} is outside fabric.clusterCidrs ${cluster.text}: the cluster's ranges must hold the node's`,
      );
  }
}

/**
 * A list of cluster ranges (fabric.clusterCidrs, etcd.clusterCidrs) parsed: CIDRs, at most one per
 * family; `field` names the list in the refusal.
 */
export function clusterRanges(field: string, list: readonly string[], fail: (msg: string) => never): Cidr[] {
  const ranges: Cidr[] = [];
  for (const text of list) {
    let cidr: Cidr;
    try {
      cidr = parseCidr(text);
    } catch (err) {
      return fail(`${field}: ${(err as Error).message}`);
    }
    if (ranges.some((r) => r.family === cidr.family))
      fail(`${field} has two IPv${cidr.family} ranges; give one per family`);
    ranges.push(cidr);
  }
  return ranges;
}
