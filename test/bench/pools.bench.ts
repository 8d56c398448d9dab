// Pool sources: what the etcd source costs on the attach path next to the static one, in one run on
// one machine (the same in-process daemon, recording backend, gRPC over the unix socket, durable store
// writes; only the pool source differs), plus block claim latency and etcd writes per 1,000 attaches,
// against a real 3-member etcd cluster in a test-owned namespace.
// Run alone with: node dist/test/bench/pools.bench.js [--count N] [--parallel N]

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ApiClient } from '../../cli/api-client';
import { BACKEND, type Backend } from '../../core/backend';
import { DEFAULT_CONFIG, type ConfigOverrides } from '../../core/config';
import { mergeConfig } from '../../core/daemon/config-check';
import { createContainer } from '../../core/daemon/container';
import { Daemon } from '../../core/daemon/daemon';
import { silentLogger } from '../../core/logger';
import { Metrics } from '../../core/metrics';
import { STORE } from '../../core/store/store';
import { POOL_SOURCE, type PoolSource } from '../../core/ipam/pool-source';
import type { Store } from '../../core/store/store';
import { claimBlock } from '../../sources/etcd/block-claimer';
import { blockLayout } from '../../sources/etcd/block-layout';
import { BlockRegistry } from '../../sources/etcd/block-registry';
import { EtcdPoolSource } from '../../sources/etcd/etcd-pool-source';
import { staticPoolSourceModule } from '../../sources/static/module';
import { NetnsSet } from '../support/netns';
import { RecordingBackend } from '../support/recording-backend';
import { EtcdCluster } from '../support/etcd-cluster';
import { percentile, ratePerSecond, timeMs } from './stats';
import { attachRequest } from '../support/attach-request';
import { printRowsAndExit } from './bench-main';

export interface PoolBenchRow {
  name: string;
  value: number;
  unit: string;
}

const CLUSTER = '10.128.0.0/14';

interface BenchDaemon {
  client: ApiClient;
  stop(): Promise<void>;
}

/** An in-process daemon with the recording backend and, when given, a pool source of its own. */
async function startDaemon(
  dir: string,
  overrides: ConfigOverrides,
  source?: (store: Store, metrics: Metrics) => PoolSource,
): Promise<BenchDaemon> {
  const config = mergeConfig(DEFAULT_CONFIG, {
    socket: path.join(dir, 'api.sock'),
    cniSocket: path.join(dir, 'cni.sock'),
    stateDir: path.join(dir, 'state'),
    ...overrides,
  });
  const metrics = new Metrics();
  const container = createContainer(config, silentLogger(), metrics);
  container.bind<Backend>(BACKEND).toConstantValue(new RecordingBackend());
  container.load(staticPoolSourceModule(config, silentLogger()));
  if (source)
    container
      .rebind<PoolSource>(POOL_SOURCE)
      .toDynamicValue((ctx) => source(ctx.container.get<Store>(STORE), metrics));
  const daemon = new Daemon(container);
  await daemon.start();
  const client = new ApiClient(config.socket, 30_000);
  return {
    client,
    stop: async () => {
      client.close();
      await daemon.stop();
    },
  };
}

/** Sequential attach latencies (ms) and the attach rate at `parallel`, after an untimed warm-up. */
async function measureAttach(
  d: BenchDaemon,
  netnsPath: string,
  count: number,
  parallel: number,
): Promise<{ p50: number; p99: number; rate: number }> {
  const c = d.client;
  const attach = (id: string) => () => c.call(c.raw.attach, attachRequest(id, netnsPath));
  const detach = (id: string) => () => c.call(c.raw.detach, { workloadId: id, netns: undefined });
  await ratePerSecond(
    Array.from({ length: count }, (_, i) => attach(`warm-${i}`)),
    parallel,
  );
  await ratePerSecond(
    Array.from({ length: count }, (_, i) => detach(`warm-${i}`)),
    parallel,
  );
  const ms: number[] = [];
  for (let i = 0; i < count; i++) ms.push(await timeMs(attach(`seq-${i}`)));
  await ratePerSecond(
    Array.from({ length: count }, (_, i) => detach(`seq-${i}`)),
    parallel,
  );
  const rate = await ratePerSecond(
    Array.from({ length: count }, (_, i) => attach(`par-${i}`)),
    parallel,
  );
  await ratePerSecond(
    Array.from({ length: count }, (_, i) => detach(`par-${i}`)),
    parallel,
  );
  return { p50: percentile(ms, 50), p99: percentile(ms, 99), rate };
}

const round = (n: number, digits = 3): number => Number(n.toFixed(digits));

export async function benchPools(opts: { count: number; parallel: number }): Promise<PoolBenchRow[]> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-pools-bench-'));
  const namespaces = new NetnsSet('wn-pools-b');
  const etcd = await EtcdCluster.start(path.join(root, 'etcd'));
  const client = etcd.client();
  const rows: PoolBenchRow[] = [];
  try {
    const netnsPath = namespaces.add().path;
    const etcdSource =
      (node: string) =>
      (store: Store, metrics: Metrics): PoolSource =>
        new EtcdPoolSource({
          endpoints: etcd.localEndpoints,
          clusterCidrs: [CLUSTER],
          blockSize: 26,
          prefix: '/workloadnet',
          nodeName: node,
          emptyBlockGraceMs: 3_600_000,
          store,
          metrics,
          logger: silentLogger(),
        });
    const waitForBlock = async (d: BenchDaemon): Promise<void> => {
      for (let i = 0; i < 200; i++) {
        const st = await d.client.status();
        if (st.ready && st.poolSource?.connected && st.pools.length > 0) return;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error('etcd source did not get its first block');
    };

    // Static and etcd sources, alternated twice so that neither always runs on a warmer machine.
    const results: Record<'static' | 'etcd', Array<{ p50: number; p99: number; rate: number }>> = {
      static: [],
      etcd: [],
    };
    for (let round_ = 0; round_ < 2; round_++) {
      const s = await startDaemon(path.join(root, `static-${round_}`), { podCidrs: ['10.90.0.0/16'] });
      try {
        results.static.push(await measureAttach(s, netnsPath, opts.count, opts.parallel));
      } finally {
        await s.stop();
      }
      const e = await startDaemon(
        path.join(root, `etcd-${round_}`),
        { podCidrs: [] },
        etcdSource(`bench-node-${round_}`),
      );
      try {
        await waitForBlock(e);
        results.etcd.push(await measureAttach(e, netnsPath, opts.count, opts.parallel));
      } finally {
        await e.stop();
      }
    }
    const med = (xs: number[]): number => percentile(xs, 50);
    const st = {
      p50: med(results.static.map((r) => r.p50)),
      p99: med(results.static.map((r) => r.p99)),
      rate: med(results.static.map((r) => r.rate)),
    };
    const et = {
      p50: med(results.etcd.map((r) => r.p50)),
      p99: med(results.etcd.map((r) => r.p99)),
      rate: med(results.etcd.map((r) => r.rate)),
    };
    rows.push(
      { name: 'pools: attach p50, static source (recording backend)', value: round(st.p50), unit: 'ms' },
      { name: 'pools: attach p50, etcd source (recording backend)', value: round(et.p50), unit: 'ms' },
      { name: 'pools: attach p99, static source', value: round(st.p99), unit: 'ms' },
      { name: 'pools: attach p99, etcd source', value: round(et.p99), unit: 'ms' },
      { name: `pools: attach rate@${opts.parallel}, static source`, value: Math.round(st.rate), unit: '/s' },
      { name: `pools: attach rate@${opts.parallel}, etcd source`, value: Math.round(et.rate), unit: '/s' },
      { name: 'pools: etcd/static attach p50', value: round(et.p50 / st.p50), unit: 'ratio' },
      {
        name: `pools: etcd/static attach rate@${opts.parallel}`,
        value: round(et.rate / st.rate),
        unit: 'ratio',
      },
    );

    // etcd writes per 1,000 attaches (and their detaches), from a node that starts with no block.
    const e = await startDaemon(path.join(root, 'etcd-writes'), { podCidrs: [] }, etcdSource('bench-writes'));
    try {
      await waitForBlock(e);
      const before = await etcd.revision();
      const c = e.client;
      await ratePerSecond(
        Array.from(
          { length: 1000 },
          (_, i) => () => c.call(c.raw.attach, attachRequest(`w-${i}`, netnsPath)),
        ),
        opts.parallel,
      );
      await ratePerSecond(
        Array.from(
          { length: 1000 },
          (_, i) => () => c.call(c.raw.detach, { workloadId: `w-${i}`, netns: undefined }),
        ),
        opts.parallel,
      );
      rows.push({
        name: 'pools: etcd writes per 1,000 attaches and detaches (block claims, /26 blocks)',
        value: (await etcd.revision()) - before,
        unit: 'writes',
      });
    } finally {
      await e.stop();
    }

    // Block claim latency: one read of the ownership keys plus one compare-and-create transaction.
    const registry = new BlockRegistry(client, '/bench-claims');
    const layout = blockLayout(CLUSTER, 26);
    const claimMs: number[] = [];
    for (let i = 0; i < 200; i++)
      claimMs.push(await timeMs(() => claimBlock(registry, layout, `claimer-${i % 4}`)));
    rows.push(
      {
        name: 'pools: block claim latency p50 (3-member etcd, loopback)',
        value: round(percentile(claimMs, 50)),
        unit: 'ms',
      },
      { name: 'pools: block claim latency p99', value: round(percentile(claimMs, 99)), unit: 'ms' },
    );
  } finally {
    client.close();
    await etcd.stop();
    namespaces.cleanup();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return rows;
}

if (require.main === module) {
  const arg = (name: string, dflt: number): number => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? Number(process.argv[i + 1]) : dflt;
  };
  printRowsAndExit(benchPools({ count: arg('count', 300), parallel: arg('parallel', 8) }));
}
