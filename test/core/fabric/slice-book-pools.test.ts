import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { unavailable } from '../../../core/errors';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import type { EndpointPools, PoolSource } from '../../../core/ipam/pool-source';
import type { PoolSourceStatus } from '../../../core/workload-service';
import { PoolSupply } from '../../../core/ipam/pool-supply';
import { SliceBook } from '../../../core/fabric/slice-book';
import { StaticPoolSource } from '../../../sources/static/static-pool-source';
import { silentLogger } from '../../../core/logger';
import { Store } from '../../../core/store/store';
import type { AttachmentRecord } from '../../../core/store/attachment-record';
import { rejection } from '../../support/expect-error';

// The slice book choosing by what the pool source offers: a source with pools per endpoint (etcd
// blocks per DPU) gets no cut, an endpoint's ports come from its pools, a full endpoint asks the
// source for more before borrowing; a source without them (static, a Node's podCIDRs) is cut as before.

/** A source handing out /28 pools per endpoint from a list, or failing as told. */
class PerEndpointSource implements PoolSource {
  readonly kind = 'fake';
  allocator?: IpAllocator;
  used = false;
  asked: Array<[number, string]> = [];
  fail?: Error;
  next = ['10.98.0.0/28', '10.98.0.16/28', '10.98.0.32/28', '10.98.0.48/28'];
  readonly endpointPools: EndpointPools = {
    use: () => {
      this.used = true;
    },
    present: () => undefined,
    needMoreFor: async (family, endpoint) => {
      this.asked.push([family, endpoint]);
      if (this.fail) throw this.fail;
      const cidr = this.next.shift();
      if (!cidr) throw unavailable('no block left');
      this.allocator!.addPool({ cidr, wholeBlock: true, endpoint });
    },
  };
  families(): ReadonlyArray<4 | 6> {
    return [4];
  }
  async start(allocator: IpAllocator): Promise<void> {
    this.allocator = allocator;
  }
  isReady(): boolean {
    return true;
  }
  status(): PoolSourceStatus {
    return { kind: this.kind, ready: true, connected: true, reasons: [] };
  }
  async stop(): Promise<void> {}
}

function row(key: string, endpoint: string, address: string): AttachmentRecord {
  return {
    key,
    workloadId: key,
    ifName: 'eth0',
    netnsPath: `/var/run/netns/${key}`,
    netnsInode: 1,
    ips: [{ family: 4, address, gateway: '169.254.1.1' }],
    mtu: 1500,
    backend: 'dpu',
    network: 'default',
    endpoint,
    state: 'ready',
    createdAt: new Date(0).toISOString(),
  };
}

describe('slice book over pools per endpoint', () => {
  let dir: string;
  let store: Store;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-slicepools-'));
    store = Store.open(dir, { node: 'n1', bootId: 'boot-1' });
  });
  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function book(
    source: PoolSource,
    allocator: IpAllocator,
    rows: AttachmentRecord[] = [],
    strict = false,
  ): Promise<{ book: SliceBook; supply: PoolSupply }> {
    const supply = new PoolSupply(source, allocator);
    await supply.start();
    const b = new SliceBook({
      count: 4,
      strict,
      networks: [{ name: 'default', allocator, supply }],
      store: () => store,
      log: silentLogger(),
    });
    await b.load(rows);
    for (const r of rows) {
      for (const ip of r.ips) allocator.markUsed(ip.address);
      b.restored(r);
    }
    b.restoredAll();
    return { book: b, supply };
  }

  it("addresses each endpoint's ports from its own pools, asking the source when they are full, and cuts nothing", async () => {
    const source = new PerEndpointSource();
    const allocator = new IpAllocator([]);
    const { book: b, supply } = await book(source, allocator);
    expect(source.used, 'told to give pools per endpoint').to.equal(true);
    const a = await b.allocate(supply, 'd0');
    const c = await b.allocate(supply, 'd1');
    expect(a[0]!.address.startsWith('10.98.0.')).to.equal(true);
    expect(allocator.poolFor(a[0]!.address)?.endpoint).to.equal('d0');
    expect(allocator.poolFor(c[0]!.address)?.endpoint).to.equal('d1');
    expect(
      allocator.allPools().every((p) => p.sliceCount === 1),
      'no pool cut',
    ).to.equal(true);
    for (let i = 0; i < 16; i++) await b.allocate(supply, 'd0');
    expect(source.asked).to.deep.equal([
      [4, 'd0'],
      [4, 'd1'],
      [4, 'd0'],
    ]);
    expect(b.borrowed).to.equal(0);
    expect(b.own().byEndpoint.get('d0')).to.deep.equal(['10.98.0.0/28', '10.98.0.32/28']);
    expect(b.own().byEndpoint.get('d1')).to.deep.equal(['10.98.0.16/28']);
    expect([...b.assignments()], 'no slice index given').to.deep.equal([]);
    expect(b.sliceCount, 'Status: no range is cut into slices').to.equal(0);
  });

  it('borrows when the source cannot give more, and under strict slices refuses with its UNAVAILABLE', async () => {
    const source = new PerEndpointSource();
    const allocator = new IpAllocator([]);
    const { book: b, supply } = await book(source, allocator);
    await b.allocate(supply, 'd1');
    source.fail = unavailable('etcd is unreachable (test); retry');
    const borrowed = await b.allocate(supply, 'd0');
    expect(allocator.poolFor(borrowed[0]!.address)?.endpoint, "borrowed from d1's pool").to.equal('d1');
    expect(b.borrowed).to.equal(1);
    expect(b.own().byEndpoint.get('d0')).to.deep.equal([`${borrowed[0]!.address}/32`]);

    const strictStore = new PerEndpointSource();
    strictStore.fail = unavailable('etcd is unreachable (test); retry');
    const other = new IpAllocator([]);
    other.addPool({ cidr: '10.98.1.0/28', wholeBlock: true, endpoint: 'd1' });
    const s = await book(strictStore, other, [], true);
    const err = await rejection(s.book.allocate(s.supply, 'd0'), 'UNAVAILABLE');
    expect(err.message).to.include('etcd is unreachable');
    expect(other.allPools()[0]!.used, 'nothing taken').to.equal(0);
  });

  it("restores a stored address in another endpoint's pool as borrowed, and one in its own as its own", async () => {
    const source = new PerEndpointSource();
    const allocator = new IpAllocator([
      { cidr: '10.98.2.0/28', wholeBlock: true, endpoint: 'd0' },
      { cidr: '10.98.2.16/28', wholeBlock: true, endpoint: 'd1' },
      { cidr: '10.98.2.32/28', wholeBlock: true },
    ]);
    const { book: b } = await book(source, allocator, [
      row('w1', 'd0', '10.98.2.3'),
      row('w2', 'd0', '10.98.2.20'),
      row('w3', 'd1', '10.98.2.40'),
    ]);
    expect(Object.fromEntries(b.borrowedAddresses())).to.deep.equal({
      '10.98.2.20': 'd0',
      '10.98.2.40': 'd1',
    });
    expect(b.own().byEndpoint.get('d0')).to.deep.equal(['10.98.2.0/28', '10.98.2.20/32']);
    expect(b.own().byEndpoint.get('d1')).to.deep.equal(['10.98.2.16/28', '10.98.2.40/32']);
  });

  it('still cuts the ranges of a source without pools per endpoint (static, a Node podCIDR)', async () => {
    const allocator = new IpAllocator([{ cidr: '10.244.1.0/24' }]);
    const { book: b, supply } = await book(new StaticPoolSource(), allocator);
    await b.setPresent(['d0', 'd1']);
    const a = await b.allocate(supply, 'd1');
    expect(b.own().byEndpoint.get('d1')).to.deep.equal(['10.244.1.64/26']);
    expect(allocator.poolFor(a[0]!.address)?.sliceOf(a[0]!.address)).to.equal(1);
    expect(b.sliceCount).to.equal(4);
  });
});
