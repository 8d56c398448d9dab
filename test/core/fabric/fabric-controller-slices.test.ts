import { expect } from 'chai';
import { FabricController } from '../../../core/fabric/fabric-controller';
import type { FabricSettings, OwnPrefixes } from '../../../core/fabric-dataplane';
import type { NodeRecord } from '../../../core/peer-source';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { PoolSupply } from '../../../core/ipam/pool-supply';
import { SliceBook } from '../../../core/fabric/slice-book';
import { StaticPoolSource } from '../../../sources/static/static-pool-source';
import { silentLogger } from '../../../core/logger';
import { Metrics } from '../../../core/metrics';
import type { StoredSlices } from '../../../core/store/fabric-records';
import { DpuDataplane, PublishingSource, dpu } from './dpu-recording-dataplane';
import { peer, until } from '../../support/recording-fabric-dataplane';

// The fabric controller on a node whose DPUs carry the fabric: a dataplane whose DPUs come and go, a
// slice book over a real allocator, a peer source that records what this node publishes.

const SETTINGS: FabricSettings = { mode: 'vxlan', nodeIp: '', vni: 30574, port: 4789, clusterCidrs: [] };

describe('fabric controller with DPU slices', () => {
  let dp: DpuDataplane;
  let source: PublishingSource;
  let allocator: IpAllocator;
  let book: SliceBook;
  let stored: StoredSlices | undefined;
  let metrics: Metrics;
  let controller: FabricController | undefined;

  beforeEach(() => {
    dp = new DpuDataplane();
    source = new PublishingSource();
    allocator = new IpAllocator([{ cidr: '10.244.1.0/24' }]);
    stored = undefined;
    metrics = new Metrics();
    book = new SliceBook({
      count: 4,
      strict: false,
      networks: [{ name: 'default', allocator }],
      store: () => ({
        fabricSlices: () => stored,
        putFabricSlices: async (s) => void (stored = s),
      }),
      log: silentLogger(),
    });
  });
  afterEach(async () => {
    await controller?.stop();
    controller = undefined;
  });

  function make(): FabricController {
    controller = new FabricController({
      settings: SETTINGS,
      nodeName: 'n1',
      bootId: 'boot-n1',
      source,
      dataplanes: [dp],
      backends: ['dpu'],
      withdrawGraceMs: 180_000,
      log: silentLogger(),
      metrics,
      coalesceMs: 20,
      slices: book,
    });
    return controller;
  }

  async function bookWhole(): Promise<void> {
    await book.load([]);
    book.restoredAll();
  }

  it('publishes nothing and applies nothing before the slice book holds the stored cut', async () => {
    const c = make();
    await c.start();
    dp.setDpus(['dpu-1']);
    source.set([peer('n2', 2)]);
    await new Promise((r) => setTimeout(r, 200));
    expect(source.started, 'no record without its DPUs’ slices').to.equal(undefined);
    expect(dp.owns).to.deep.equal([]);
    await bookWhole();
    await until(
      () => source.started !== undefined && dp.owns.length > 0,
      5000,
      'the first publish and apply',
    );
    expect(source.started?.endpoints?.map((e) => [e.id, e.prefixes])).to.deep.equal([
      ['dpu-1', ['10.244.1.0/26']],
    ]);
  });

  it('gives new DPUs slices, republishes the record with their prefixes and applies with own.byEndpoint', async () => {
    await bookWhole();
    const c = make();
    await c.start();
    source.set([peer('n2', 2)]);
    await until(() => source.started !== undefined && dp.owns.length > 0);
    dp.setDpus(['dpu-1', 'dpu-2']);
    await until(() => source.updates.some((u) => u.endpoints?.length === 2), 5000, 'the republished record');
    const last = source.updates.at(-1) as NodeRecord;
    expect(last.vtep, 'a DPU node has no VTEP of its own').to.equal(undefined);
    expect(last.endpoints).to.deep.equal([
      { ...dpu('dpu-1'), prefixes: ['10.244.1.0/26'] },
      { ...dpu('dpu-2'), prefixes: ['10.244.1.64/26'] },
    ]);
    await until(() => dp.owns.at(-1)?.byEndpoint.size === 2, 5000, 'an apply with both DPUs');
    const own = dp.owns.at(-1) as OwnPrefixes;
    expect(own.ranges).to.deep.equal(['10.244.1.0/24']);
    expect(Object.fromEntries(own.byEndpoint)).to.deep.equal({
      'dpu-1': ['10.244.1.0/26'],
      'dpu-2': ['10.244.1.64/26'],
    });
    expect(stored?.endpoints).to.deep.equal({ 'dpu-1': 0, 'dpu-2': 1 });
    expect(c.status().endpoints?.map((e) => e.prefixes)).to.deep.equal([
      ['10.244.1.0/26'],
      ['10.244.1.64/26'],
    ]);
  });

  it('a borrow republishes and applies again, coalesced; Status and the gauge count it', async () => {
    allocator = new IpAllocator([{ cidr: '10.0.0.0/28' }]);
    book = new SliceBook({
      count: 4,
      strict: false,
      networks: [{ name: 'default', allocator }],
      store: () => ({ fabricSlices: () => stored, putFabricSlices: async (s) => void (stored = s) }),
      log: silentLogger(),
    });
    await bookWhole();
    const c = make();
    await c.start();
    dp.setDpus(['dpu-1', 'dpu-2']);
    source.set([peer('n2', 2)]);
    await until(() => dp.owns.at(-1)?.byEndpoint.size === 2);
    const supply = new PoolSupply(new StaticPoolSource(), allocator);
    for (let i = 0; i < 4; i++) await book.allocate(supply, 'dpu-2');
    const applies = dp.owns.length;
    const [borrowed] = await book.allocate(supply, 'dpu-2');
    const want = ['10.0.0.4/30', `${borrowed?.address}/32`];
    await until(
      () => source.updates.at(-1)?.endpoints?.[1]?.prefixes.length === 2,
      5000,
      'the borrow published',
    );
    expect(source.updates.at(-1)?.endpoints?.[1]?.prefixes).to.deep.equal(want);
    await until(() => dp.owns.length > applies);
    expect(dp.owns.at(-1)?.byEndpoint.get('dpu-2')).to.deep.equal(want);
    const st = c.observe();
    expect(st.borrowed).to.equal(1);
    expect(st.slices).to.equal(4);
    expect(await metrics.registry.getSingleMetricAsString('workloadnet_fabric_borrowed_addresses')).to.match(
      /workloadnet_fabric_borrowed_addresses 1$/m,
    );
    book.released([borrowed?.address as string]);
    await until(
      () => source.updates.at(-1)?.endpoints?.[1]?.prefixes.length === 1,
      5000,
      'the release published',
    );
    expect(c.observe().borrowed).to.equal(0);
  });
});
