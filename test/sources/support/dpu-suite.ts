import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { BlockRegistry } from '../../../sources/etcd/block-registry';
import { CLI } from '../../support/daemon-process';
import { DPU_PREFIX, type DpuPoolNode } from './dpu-pool-node';
import { etcdSuite, type EtcdSuite } from './etcd-suite';

// The set-up of the suites about blocks per DPU: an etcd suite whose keys live under DPU_PREFIX, the
// nodes a test starts (stopped after it, and every key under the prefix deleted), the blocks as they
// stand in etcd, and the cluster commands an operator runs against it.

export interface DpuSuite extends EtcdSuite {
  /** The block registry under DPU_PREFIX, as the pool sources and the cluster commands read it. */
  registry: BlockRegistry;
  /** The nodes the test started: each is stopped after it. */
  nodes: DpuPoolNode[];
  /** A new folder under the suite's root, for one node's store. */
  dir(name: string): string;
  /** The raw value of each block key, by block. */
  values(): Promise<Record<string, string>>;
  /** `workloadnet cluster <args>` against the cluster's members. */
  cli(...args: string[]): { code: number; stdout: string; stderr: string };
}

/** An etcd suite (etcd-suite.ts) for DPU blocks; call it first in the describe block. */
export function dpuSuite(name: string): DpuSuite {
  const suite = etcdSuite(name) as DpuSuite;
  let run = 0;
  suite.nodes = [];
  before(() => {
    suite.registry = new BlockRegistry(suite.client, DPU_PREFIX);
  });
  afterEach(async () => {
    for (const n of suite.nodes.splice(0)) await n.stop().catch(() => undefined);
    await suite.client.delete().prefix(`${DPU_PREFIX}/`);
  });
  suite.dir = (node) => path.join(suite.root, `${node}-${run++}`);
  suite.values = async () => {
    const all = await suite.client.namespace(`${DPU_PREFIX}/`).getAll().prefix('blocks/').strings();
    return Object.fromEntries(
      Object.entries(all).map(([k, v]) => [k.slice('blocks/'.length).replace('-', '/'), v]),
    );
  };
  suite.cli = (...args) => {
    const r = spawnSync(
      process.execPath,
      [CLI, 'cluster', ...args, '--etcd-endpoints', suite.etcd.localEndpoints.join(',')],
      { encoding: 'utf8' },
    );
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  return suite;
}
