import * as path from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import { cidrContains, parseAddress, parseCidr } from '../../../lib/cidr';
import type { StatusResponse } from '../../../proto/gen/workloadnet/v1/workload';
import { DaemonProcess } from '../../support/daemon-process';
import { addNodeUplink, type NetnsSet } from '../../support/netns';
import type { EtcdCluster } from '../../support/etcd-cluster';
import { attachRequest } from '../../support/attach-request';
import { waitUntil } from '../../support/wait-until';

// Daemons as separate cluster nodes: each runs in the etcd cluster's namespace (so it reaches etcd on
// that loopback) and programs its own node namespace through --host-netns.

export interface PoolNode {
  name: string;
  dir: string;
  nodeNetns: string;
  daemon: DaemonProcess;
  args: string[];
}

export async function startEtcdNode(
  name: string,
  root: string,
  etcd: EtcdCluster,
  namespaces: NetnsSet,
  clusterCidrs: string[],
  extra: string[] = [],
  /** Its state directory under root; two daemons may be given one node name. */
  dirName = name,
): Promise<PoolNode> {
  const node = namespaces.add();
  addNodeUplink(node.name);
  const args = [
    '--pool-source',
    'etcd',
    '--node-name',
    name,
    '--etcd-endpoints',
    etcd.endpoints.join(','),
    ...clusterCidrs.flatMap((c) => ['--cluster-cidr', c]),
    '--host-netns',
    node.path,
    ...extra,
  ];
  const dir = path.join(root, dirName);
  const daemon = await DaemonProcess.start({ dir, netns: etcd.netns, args });
  return { name, dir, nodeNetns: node.path, daemon, args };
}

export async function restartNode(n: PoolNode, netns: string): Promise<void> {
  n.daemon = await DaemonProcess.start({ dir: n.dir, netns, args: n.args });
}

export function status(d: DaemonProcess): Promise<StatusResponse> {
  return d.client.status();
}

/**
 * Polls until `check` passes (returns true) or the time is up; then fails with the last state. Calls
 * that fail meanwhile (a daemon restarting, etcd electing) count as "not yet".
 */
export function eventually(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  return waitUntil(check, what, timeoutMs, { intervalMs: 100, retryOnError: true });
}

export async function attach(d: DaemonProcess, workloadId: string, netnsPath: string): Promise<string[]> {
  const res = await d.client.call(d.client.raw.attach, attachRequest(workloadId, netnsPath));
  return res.ips.map((i) => i.cidr.split('/')[0]!);
}

export async function detach(d: DaemonProcess, workloadId: string): Promise<void> {
  await d.client.call(d.client.raw.detach, { workloadId, netns: undefined });
}

export const grpcCode = (err: unknown): number | undefined => (err as grpc.ServiceError).code;

export function inBlock(address: string, block: string): boolean {
  const a = parseAddress(address);
  const c = parseCidr(block);
  return a.family === c.family && cidrContains(c, a.value);
}
