import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Etcd3 } from 'etcd3';
import { EtcdCluster, haveEtcd } from '../../support/etcd-cluster';
import { isRoot } from '../../support/netns';
import { waitUntil } from '../../support/wait-until';

// The set-up every etcd source suite shares: one real 3-member cluster for the whole describe block,
// in a scratch folder, and a key prefix per test so that tests share the cluster without seeing each
// other's nodes or blocks.

/** What a suite's tests reach, filled in by its hooks. */
export interface EtcdSuite {
  /** The scratch folder: the cluster's data and anything the tests keep on disk. */
  root: string;
  etcd: EtcdCluster;
  /** A client of the cluster, for the test to read and write keys as an operator would. */
  client: Etcd3;
  /** This test's own key prefix (`/<name><n>`), new for each test. */
  prefix: string;
}

/**
 * Starts a cluster before the tests of the describe block it is called in and stops it, and removes its
 * folder, after them. `name` (short: it names network namespaces) names the folder, the cluster's
 * namespaces and the prefixes. Call it first in the block, so that the block's own hooks can use it.
 */
export function etcdSuite(name: string): EtcdSuite {
  const suite = {} as EtcdSuite;
  let seq = 0;
  before(async () => {
    suite.root = fs.mkdtempSync(path.join(os.tmpdir(), name));
    suite.etcd = await EtcdCluster.start(path.join(suite.root, 'etcd'), 3, name);
    suite.client = suite.etcd.client();
  });
  beforeEach(() => {
    suite.prefix = `/${name}${seq++}`;
  });
  after(async () => {
    suite.client?.close();
    await suite.etcd?.stop();
    if (suite.root) fs.rmSync(suite.root, { recursive: true, force: true });
  });
  return suite;
}

/** Waits for `check` every 50 ms, through errors (a member killed under the test). */
export function until(what: string, check: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  return waitUntil(check, what, ms, { intervalMs: 50, retryOnError: true });
}

/** A describe block of tests on a real etcd cluster: skipped without root or without etcd installed. */
export const describeEtcd = isRoot && haveEtcd ? describe : describe.skip;
