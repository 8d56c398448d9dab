import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { PoolSupply } from '../../../core/ipam/pool-supply';
import { SliceBook, endpointOf } from '../../../core/fabric/slice-book';
import { StaticPoolSource } from '../../../sources/static/static-pool-source';
import { silentLogger } from '../../../core/logger';
import { Store } from '../../../core/store/store';
import type { AttachmentRecord } from '../../../core/store/attachment-record';
import { rejection } from '../../support/expect-error';

// The slice book against a real store: which DPU owns which slice, what it borrowed, and what survives
// a restart. The allocator is the real one; only the daemon around it is left out.

const V4 = '10.244.1.0/24';
const V6 = 'fd00:1::/120';

/** One node's book and pools, on the store in `dir`, as a start of the daemon builds them. */
class Node {
  readonly store: Store;
  readonly allocator: IpAllocator;
  readonly supply: PoolSupply;
  readonly book: SliceBook;
  changes = 0;

  constructor(dir: string, opts: { count?: number; strict?: boolean; ranges?: string[] } = {}) {
    this.store = Store.open(dir, { node: 'n1', bootId: 'boot-1' });
    this.allocator = new IpAllocator((opts.ranges ?? [V4]).map((cidr) => ({ cidr })));
    this.supply = new PoolSupply(new StaticPoolSource(), this.allocator);
    this.book = new SliceBook({
      count: opts.count ?? 4,
      strict: opts.strict ?? false,
      networks: [{ name: 'default', allocator: this.allocator }],
      store: () => this.store,
      log: silentLogger(),
    });
    this.book.onChange(() => this.changes++);
  }

  /** What the start-up reconcile does with the book: load, hold every row, done. */
  async open(): Promise<this> {
    const rows = this.store.all();
    await this.book.load(rows);
    for (const rec of rows) {
      for (const ip of rec.ips) this.allocator.markUsed(ip.address);
      this.book.restored(rec);
    }
    this.book.restoredAll();
    return this;
  }

  /** An attach on `endpoint`: addresses from the book, recorded as the orchestrator records them. */
  async attach(key: string, endpoint: string, record = true): Promise<string[]> {
    const ips = await this.book.allocate(this.supply, endpoint);
    if (record)
      await this.store.put(
        row(
          key,
          endpoint,
          ips.map((i) => i.address),
        ),
      );
    return ips.map((i) => i.address);
  }

  async detach(key: string): Promise<void> {
    const released = await this.store.remove(key);
    const addresses = released.map((i) => i.address);
    this.allocator.release(addresses);
    this.book.released(addresses);
  }

  prefixes(endpoint: string): readonly string[] {
    return this.book.own().byEndpoint.get(endpoint) ?? [];
  }

  close(): Promise<void> {
    return this.store.close();
  }
}

function row(key: string, endpoint: string | undefined, addresses: string[]): AttachmentRecord {
  const [workloadId = '', ifName = ''] = key.split('/');
  return {
    key,
    workloadId,
    ifName,
    netnsPath: `/var/run/netns/${workloadId}`,
    netnsInode: 1,
    ips: addresses.map((address) => ({
      family: address.includes(':') ? 6 : 4,
      address,
      gateway: '169.254.1.1',
    })),
    mtu: 1500,
    backend: 'dpu',
    network: 'default',
    ...(endpoint ? { endpoint } : {}),
    state: 'ready',
    createdAt: new Date(0).toISOString(),
  };
}

describe('slice book', () => {
  let dir: string;
  let node: Node | undefined;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-slices-'))));
  afterEach(async () => {
    await node?.close();
    node = undefined;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function start(opts: ConstructorParameters<typeof Node>[1] = {}): Promise<Node> {
    await node?.close();
    node = await new Node(dir, opts).open();
    return node;
  }

  it('gives slice indices first come, lowest free, and keeps them across a reopen of the store', async () => {
    let n = await start();
    await n.book.setPresent(['dpu-b', 'dpu-a']);
    await n.book.assign(['dpu-c']);
    expect(Object.fromEntries(n.book.assignments())).to.deep.equal({ 'dpu-b': 0, 'dpu-a': 1, 'dpu-c': 2 });
    expect(n.prefixes('dpu-a')).to.deep.equal(['10.244.1.64/26']);
    n = await start();
    expect(Object.fromEntries(n.book.assignments()), 'after a restart').to.deep.equal({
      'dpu-b': 0,
      'dpu-a': 1,
      'dpu-c': 2,
    });
    await n.book.setPresent(['dpu-d', 'dpu-a']);
    expect(n.book.indexOf('dpu-d')).to.equal(3);
    expect(n.book.indexOf('dpu-b'), 'an absent one keeps its index while one is free').to.equal(0);
  });

  it("takes a port's addresses from the slices of the DPU it is placed on, in every range", async () => {
    const n = await start({ ranges: [V4, V6] });
    await n.book.setPresent(['dpu-a', 'dpu-b']);
    expect(await n.attach('w1/eth0', 'dpu-b')).to.deep.equal(['10.244.1.64', 'fd00:1::40']);
    expect(await n.attach('w2/eth0', 'dpu-a')).to.deep.equal(['10.244.1.2', 'fd00:1::2']);
    expect(await n.attach('w3/eth0', 'dpu-b')).to.deep.equal(['10.244.1.65', 'fd00:1::41']);
    expect(n.book.borrowed).to.equal(0);
    expect(n.prefixes('dpu-b')).to.deep.equal(['10.244.1.64/26', 'fd00:1::40/122']);
    expect(n.book.own().ranges).to.deep.equal([V4, V6]);
  });

  it('gives a DPU met first at allocation the next slice, recorded before its address is handed out', async () => {
    const n = await start();
    await n.book.setPresent(['dpu-a']);
    expect(await n.attach('w1/eth0', 'dpu-new')).to.deep.equal(['10.244.1.64']);
    expect(n.store.fabricSlices()?.endpoints).to.deep.equal({ 'dpu-a': 0, 'dpu-new': 1 });
  });

  it("borrows when the DPU's slices are full: counted, and its /32 joins that DPU's prefixes until released", async () => {
    const n = await start({ ranges: ['10.0.0.0/28'] });
    await n.book.setPresent(['dpu-a', 'dpu-b']);
    for (let i = 0; i < 4; i++) await n.attach(`w${i}/eth0`, 'dpu-b');
    expect(n.book.borrowed).to.equal(0);
    const before = n.changes;
    const [borrowed] = await n.attach('w9/eth0', 'dpu-b');
    expect(borrowed).to.match(/^10\.0\.0\./);
    expect(['10.0.0.4', '10.0.0.5', '10.0.0.6', '10.0.0.7']).to.not.include(borrowed);
    expect(n.book.borrowed).to.equal(1);
    expect(n.changes, 'a borrow is a change of the prefixes').to.be.greaterThan(before);
    expect(n.prefixes('dpu-b')).to.deep.equal(['10.0.0.4/30', `${borrowed}/32`]);
    expect(n.prefixes('dpu-a')).to.deep.equal(['10.0.0.0/30']);
    await n.detach('w9/eth0');
    expect(n.book.borrowed).to.equal(0);
    expect(n.prefixes('dpu-b')).to.deep.equal(['10.0.0.4/30']);
  });

  it('a range added by the pool source is cut too, and its slices join the prefixes with the next address', async () => {
    const n = await start();
    await n.book.setPresent(['dpu-a', 'dpu-b']);
    n.allocator.addPool({ cidr: '10.244.2.0/24' });
    const before = n.changes;
    await n.attach('w1/eth0', 'dpu-b');
    expect(n.changes, 'the new range is a change of every prefix list').to.be.greaterThan(before);
    expect(n.prefixes('dpu-b')).to.deep.equal(['10.244.1.64/26', '10.244.2.64/26']);
  });

  it('a DPU without a slice (more DPUs than slices) borrows every address', async () => {
    const n = await start({ count: 2 });
    await n.book.setPresent(['dpu-a', 'dpu-b', 'dpu-c']);
    expect(n.book.indexOf('dpu-c')).to.equal(undefined);
    const [address] = await n.attach('w1/eth0', 'dpu-c');
    expect(n.prefixes('dpu-c')).to.deep.equal([`${address}/32`]);
    expect(n.book.borrowed).to.equal(1);
  });

  it('with strictSlices refuses, naming the DPU and its slice, and leaves nothing allocated', async () => {
    const n = await start({ strict: true, ranges: ['10.0.0.0/28', 'fd00:9::/120'] });
    await n.book.setPresent(['dpu-a', 'dpu-b']);
    for (let i = 0; i < 4; i++) await n.attach(`w${i}/eth0`, 'dpu-b');
    const usedBefore = n.allocator.usage().map((u) => u.used);
    const err = await rejection(n.book.allocate(n.supply, 'dpu-b'), 'RESOURCE_EXHAUSTED');
    expect(err.message).to.include('slice 1 of DPU dpu-b (10.0.0.4/30)');
    expect(err.message).to.include('fabric.strictSlices');
    expect(
      n.allocator.usage().map((u) => u.used),
      'the IPv6 address was not taken either',
    ).to.deep.equal(usedBefore);
    expect(n.book.borrowed).to.equal(0);
  });

  it('rebuilds the borrowed set after a restart from the stored attachments and their DPU', async () => {
    let n = await start({ ranges: ['10.0.0.0/28'] });
    await n.book.setPresent(['dpu-a', 'dpu-b']);
    for (let i = 0; i < 5; i++) await n.attach(`w${i}/eth0`, 'dpu-b');
    const [borrowed] = n.store.get('w4/eth0')?.ips.map((i) => i.address) ?? [];
    // A row from before the core recorded placement: its DPU only in the DPU backend's details.
    await n.store.put({
      ...row('old/eth0', undefined, ['10.0.0.9']),
      dataplane: {
        ifName: 'eth0',
        mac: '02:00:00:00:00:01',
        mtu: 1500,
        routes: [],
        details: { dpuAgentId: 'dpu-a' },
      },
    });
    n.allocator.markUsed('10.0.0.9');
    n = await start({ ranges: ['10.0.0.0/28'] });
    expect(n.book.borrowed).to.equal(2);
    expect(n.prefixes('dpu-b')).to.deep.equal(['10.0.0.4/30', `${borrowed}/32`]);
    expect(n.prefixes('dpu-a')).to.deep.equal(['10.0.0.0/30', '10.0.0.9/32']);
  });

  it('a node upgraded to slices with live pods borrows only for those outside their DPU’s new slice', async () => {
    // Rows written before the ranges were cut: addresses from anywhere, no cut stored.
    const s = Store.open(dir, { node: 'n1', bootId: 'boot-1' });
    await s.put(row('a/eth0', 'dpu-a', ['10.244.1.2']));
    await s.put(row('b/eth0', 'dpu-b', ['10.244.1.3']));
    await s.put(row('c/eth0', 'dpu-b', ['10.244.1.70']));
    await s.close();
    const n = await start();
    expect(n.book.borrowed, 'no DPU holds a slice yet').to.equal(3);
    await n.book.setPresent(['dpu-a', 'dpu-b']);
    expect(n.book.borrowed).to.equal(1);
    expect(n.prefixes('dpu-a')).to.deep.equal(['10.244.1.0/26']);
    expect(n.prefixes('dpu-b'), 'its pod inside dpu-a’s slice keeps a /32').to.deep.equal([
      '10.244.1.64/26',
      '10.244.1.3/32',
    ]);
  });

  describe('never moves a slice from under a live pod', () => {
    it('a DPU that goes away with live pods keeps its slice; a newcomer borrows; it comes back to the same slice', async () => {
      const n = await start({ count: 2 });
      await n.book.setPresent(['dpu-a', 'dpu-b']);
      const [live] = await n.attach('w1/eth0', 'dpu-b');
      await n.book.setPresent(['dpu-a']);
      await n.book.setPresent(['dpu-a', 'dpu-c']);
      expect(n.book.indexOf('dpu-b'), 'its pod still lives in its slice').to.equal(1);
      expect(n.book.indexOf('dpu-c')).to.equal(undefined);
      expect(n.prefixes('dpu-b')).to.deep.equal(['10.244.1.128/25']);
      expect(live).to.equal('10.244.1.128');
      await n.book.setPresent(['dpu-a', 'dpu-c', 'dpu-b']);
      expect(n.book.indexOf('dpu-b')).to.equal(1);
    });

    it('keeps the slice while another DPU borrowed an address inside it', async () => {
      const n = await start({ count: 2, ranges: ['10.0.0.0/29'] });
      // A /29 cut in 2: slices of 4 addresses; slice 0 loses the network and .1.
      await n.book.setPresent(['dpu-a', 'dpu-b']);
      await n.attach('w1/eth0', 'dpu-a');
      await n.attach('w2/eth0', 'dpu-a');
      const [borrowed] = await n.attach('w3/eth0', 'dpu-a');
      expect(borrowed, "borrowed inside dpu-b's slice").to.equal('10.0.0.4');
      await n.book.setPresent(['dpu-a']);
      await n.book.setPresent(['dpu-a', 'dpu-c']);
      expect(n.book.indexOf('dpu-b')).to.equal(1);
      expect(n.book.indexOf('dpu-c')).to.equal(undefined);
    });

    it('gives a departed DPU’s empty slice to a newcomer once no address in it is in use', async () => {
      const n = await start({ count: 2 });
      await n.book.setPresent(['dpu-a', 'dpu-b']);
      await n.attach('w1/eth0', 'dpu-b');
      await n.book.setPresent(['dpu-a']);
      await n.detach('w1/eth0');
      await n.book.setPresent(['dpu-a', 'dpu-c']);
      expect(n.book.indexOf('dpu-c')).to.equal(1);
      expect(n.book.indexOf('dpu-b')).to.equal(undefined);
      expect(n.store.fabricSlices()?.endpoints).to.deep.equal({ 'dpu-a': 0, 'dpu-c': 1 });
    });

    it('keeps the stored cut when dpu.fabricSlices changes while attachments hold addresses, and says so', async () => {
      let n = await start({ count: 4 });
      await n.book.setPresent(['dpu-a', 'dpu-b']);
      const [live] = await n.attach('w1/eth0', 'dpu-b');
      expect(live).to.equal('10.244.1.64');
      n = await start({ count: 2 });
      expect(n.book.sliceCount).to.equal(4);
      expect(n.book.warnings.join(' ')).to.match(
        /dpu\.fabricSlices is 2, but the ranges were cut into 4 slices/,
      );
      expect(n.prefixes('dpu-b'), 'the live pod stays inside its DPU slice').to.deep.equal([
        '10.244.1.64/26',
      ]);
      expect(n.book.borrowed).to.equal(0);
      expect(n.store.fabricSlices()?.count).to.equal(4);
      await n.detach('w1/eth0');
      n = await start({ count: 2 });
      expect(n.book.sliceCount, 'applied at the first start without attachments').to.equal(2);
      expect(n.book.warnings).to.deep.equal([]);
      expect(n.prefixes('dpu-b')).to.deep.equal(['10.244.1.128/25']);
    });
  });
});

describe('slice book: the endpoint of a stored attachment', () => {
  const rec = (endpoint: string | undefined, dpuAgentId?: string): AttachmentRecord =>
    ({
      ...(endpoint === undefined ? {} : { endpoint }),
      dataplane: dpuAgentId ? { details: { dpuAgentId } } : undefined,
    }) as unknown as AttachmentRecord;

  it('is what place() recorded; "" is a place that is no endpoint, never read from the details', () => {
    expect(endpointOf(rec('dpu-a', 'dpu-a'))).to.equal('dpu-a');
    expect(endpointOf(rec('', 'dpu-v2')), 'a DPU that does not carry the fabric').to.equal(undefined);
    expect(endpointOf(rec(undefined, 'dpu-old')), 'a row from before the field').to.equal('dpu-old');
  });
});
