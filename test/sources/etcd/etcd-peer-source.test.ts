import { expect } from 'chai';
import { nodeRecord, tunnelEndpoint } from '../support/node-records';
import { silentLogger } from '../../../core/logger';
import { currentBootId } from '../../../lib/boot-id';
import type { NodeRecord, Peer } from '../../../core/peer-source';
import { BlockRegistry } from '../../../sources/etcd/block-registry';
import { EtcdPeerSource } from '../../../sources/etcd/etcd-peer-source';
import { waitUntil } from '../../support/wait-until';
import { holdName, type HeldName } from '../support/name-holder';
import { describeEtcd, etcdSuite, until } from '../support/etcd-suite';

// The etcd peer source against a real 3-member etcd cluster: sources in this process act as nodes,
// block ownership is written with the pool source's own registry, and members are killed, restarted
// and compacted under the sources' feet. Every test uses its own key prefix, so tests share the
// cluster without seeing each other's nodes. Each source's node name is held for it (its alive key,
// as the pool source beside it would hold it): only the name's holder publishes its record.

const V4 = '10.96.0.0/22'; // 16 blocks of /26
const V6 = 'fd96::/112'; // /122 blocks
const TTL = 2;

const record = (node: string, ip: string): NodeRecord => nodeRecord(node, ip);

describeEtcd('etcd peer source (root, real 3-member etcd cluster)', function () {
  this.timeout(120_000);
  const suite = etcdSuite('wn-peers-');
  let registry: BlockRegistry;
  const running: EtcdPeerSource[] = [];
  const held = new Map<EtcdPeerSource, HeldName>();

  interface SourceOptions {
    endpoints?: string[];
    listPage?: number;
    /** The daemon's store id (default one per node name). */
    storeId?: string;
    /** Hold the node name for it first (default true). */
    hold?: boolean;
  }

  async function source(node: string, o: SourceOptions = {}): Promise<EtcdPeerSource> {
    const storeId = o.storeId ?? `store-of-${node}`;
    const s = new EtcdPeerSource({
      endpoints: o.endpoints ?? suite.etcd.localEndpoints,
      prefix: suite.prefix,
      clusterCidrs: [V4, V6],
      blockSize: 26,
      nodeName: node,
      storeId: () => storeId,
      leaseTtlSeconds: TTL,
      logger: silentLogger(),
      tickMs: 200,
      listPage: o.listPage,
    });
    running.push(s);
    if (o.hold !== false) held.set(s, await holdName(suite.client, suite.prefix, node, storeId));
    return s;
  }

  async function started(node: string, ip: string, o?: SourceOptions): Promise<EtcdPeerSource> {
    const s = await source(node, o);
    await s.start(record(node, ip));
    await waitUntil(() => s.synced, `${node} synced`, 20_000);
    return s;
  }
  /** n2 holding 10.96.0.64/26, n1 and n2 started, once n1 sees n2. */
  async function n1SeesN2(): Promise<[EtcdPeerSource, EtcdPeerSource]> {
    await registry.create('10.96.0.64/26', 'n2');
    const a = await started('n1', '192.0.2.1');
    const b = await started('n2', '192.0.2.2');
    await until('n1 sees n2', () => a.peers().has('n2'));
    return [a, b];
  }

  /** A daemon's clean stop: its peer source, then its pool source's alive key. */
  async function stopNode(s: EtcdPeerSource): Promise<void> {
    await s.stop();
    await held.get(s)?.drop();
    held.delete(s);
  }

  const prefixesOf = (s: EtcdPeerSource, node: string): string[] | undefined => s.peers().get(node)?.prefixes;

  let lease: Promise<string> | undefined;
  /** A lease of the test's, for records it writes as a daemon would (peers ignore unleased ones). */
  const testLease = (): Promise<string> =>
    (lease ??= suite.client.lease(120, { autoKeepAlive: false }).grant());

  beforeEach(() => {
    lease = undefined;
    registry = new BlockRegistry(suite.client, suite.prefix);
  });

  afterEach(async () => {
    for (const s of running.splice(0)) await s.stop().catch(() => undefined);
    for (const h of held.values()) await h.drop();
    held.clear();
  });

  it('shows two nodes each other with the blocks they own as prefixes, never itself', async () => {
    await registry.create('10.96.0.64/26', 'n2');
    await registry.create('10.96.0.0/26', 'n1');
    await registry.create('fd96::40/122', 'n2');
    await registry.create('10.96.1.0/26', 'n2');
    const a = await source('n1');
    let changes = 0;
    a.onChange(() => changes++);
    await a.start(record('n1', '192.0.2.1'));
    await until('n1 synced', () => a.synced);
    expect(changes, 'told of the first list').to.equal(1);
    const b = await started('n2', '192.0.2.2');
    await until('n1 sees n2', () => a.peers().has('n2'));
    await until('n2 sees n1', () => b.peers().has('n1'));
    const peer = a.peers().get('n2')!;
    expect(peer).to.deep.equal({
      ...record('n2', '192.0.2.2'),
      prefixes: ['10.96.0.64/26', '10.96.1.0/26', 'fd96::40/122'],
    } satisfies Peer);
    expect(prefixesOf(b, 'n1')).to.deep.equal(['10.96.0.0/26']);
    expect([...a.peers().keys()]).to.deep.equal(['n2']);
    expect([...b.peers().keys()]).to.deep.equal(['n1']);
    expect(changes, 'n1 told of n2 arriving').to.equal(2);
    const st = a.status();
    expect(st).to.include({ kind: 'etcd', ready: true, connected: true });
    expect(st.rejected).to.deep.equal([]);
    await until('n1 reports nothing wrong', () => a.status().reasons.length === 0);
    // The record is the node's own data under its lease, stamped with its writer; prefixes are never
    // stored in it.
    const kv = (await suite.client.get(`${suite.prefix}/nodes/n1`).exec()).kvs[0]!;
    expect(JSON.parse(kv.value.toString())).to.deep.equal({
      ...record('n1', '192.0.2.1'),
      holder: { store: 'store-of-n1', boot: currentBootId() },
    });
    expect(kv.lease, 'record bound to a lease').to.not.equal('0');
  });

  it('adds a block claimed later as a new prefix of its owner, and drops a released one', async () => {
    const [a] = await n1SeesN2();
    expect(prefixesOf(a, 'n2')).to.deep.equal(['10.96.0.64/26']);
    let changes = 0;
    a.onChange(() => changes++);
    await registry.create('10.96.2.0/26', 'n2');
    await until('new block on n2', () => prefixesOf(a, 'n2')?.length === 2);
    expect(prefixesOf(a, 'n2')).to.deep.equal(['10.96.0.64/26', '10.96.2.0/26']);
    expect(changes).to.equal(1);
    await registry.release('10.96.0.64/26', 'n2');
    await until('released block gone', () => prefixesOf(a, 'n2')?.length === 1);
    expect(prefixesOf(a, 'n2')).to.deep.equal(['10.96.2.0/26']);
    expect(a.listCount, 'followed by the watch, no list again').to.equal(1);
  });

  it("ignores and reports a record announcing another node's block, a record under another name, and blocks outside the cluster CIDRs", async () => {
    await registry.create('10.96.0.64/26', 'n2');
    await registry.create('10.96.3.0/26', 'evil');
    const a = await started('n1', '192.0.2.1');
    await started('n2', '192.0.2.2');
    await until('n1 sees n2', () => a.peers().has('n2'));
    // A node that owns one block but announces n2's too, to draw its traffic.
    await suite.client
      .put(`${suite.prefix}/nodes/evil`)
      .lease(testLease())
      .value(JSON.stringify({ ...record('evil', '192.0.2.66'), prefixes: ['10.96.3.0/26', '10.96.0.64/26'] }))
      .exec();
    // A record stored under one name that speaks for another.
    await suite.client
      .put(`${suite.prefix}/nodes/liar`)
      .lease(testLease())
      .value(JSON.stringify(record('n2', '192.0.2.99')))
      .exec();
    // Ownership of a range that is no block of ours: must never become a route.
    await suite.client.put(`${suite.prefix}/blocks/0.0.0.0-0`).value('n2').exec();
    await until('three rejections', () => a.status().rejected.length === 3);
    const rejected = a.status().rejected.join('\n');
    expect(rejected).to.match(
      /node evil: its record announces 10\.96\.0\.64\/26 \(owned by n2\), which it does not own; record ignored/,
    );
    expect(rejected).to.match(/node liar: its record names node "n2", not liar; record ignored/);
    expect(rejected).to.match(
      /block key blocks\/0\.0\.0\.0-0 \(owner n2\) is not a block of the cluster CIDRs/,
    );
    expect([...a.peers().keys()]).to.deep.equal(['n2']);
    expect(prefixesOf(a, 'n2')).to.deep.equal(['10.96.0.64/26']);
    expect(a.peers().get('n2')!.underlay).to.deep.equal(['192.0.2.2']);
    // The same node with an honest record is accepted, with its own block only.
    await suite.client
      .put(`${suite.prefix}/nodes/evil`)
      .lease(testLease())
      .value(JSON.stringify(record('evil', '192.0.2.66')))
      .exec();
    await until('evil accepted', () => a.peers().has('evil'));
    expect(prefixesOf(a, 'evil')).to.deep.equal(['10.96.3.0/26']);
    expect(a.status().rejected).to.have.length(2);
  });

  it('reports blocks of a node that publishes no record, and routes none of them', async () => {
    await registry.create('10.96.0.128/26', 'ghost');
    const a = await started('n1', '192.0.2.1');
    await until('reason names the ghost', () =>
      a.status().reasons.some((r) => r.includes('ghost (10.96.0.128/26)')),
    );
    expect(a.status().reasons.join('\n')).to.match(
      /blocks owned by nodes that publish no node record are unreachable from here: ghost \(10\.96\.0\.128\/26\)/,
    );
    expect(a.peers().size).to.equal(0);
  });

  it('joins a started node, and withdraws a stopped one only when its lease expires (stop leaves the record)', async () => {
    const [a, b] = await n1SeesN2();
    const key = `${suite.prefix}/nodes/n2`;
    await stopNode(b);
    const kv = (await suite.client.get(key).exec()).kvs[0];
    expect(kv, 'record still there after a clean stop').to.not.equal(undefined);
    expect(a.peers().has('n2'), 'still a peer right after the stop').to.equal(true);
    const stoppedAt = Date.now();
    await until('n2 withdrawn', () => !a.peers().has('n2'));
    // The lease ran its course: nobody deleted the record early.
    expect(Date.now() - stoppedAt).to.be.greaterThan(TTL * 1000 - 1500);
    expect(await suite.client.get(key).string()).to.equal(null);
    expect(a.status().reasons.join('\n')).to.match(/n2 \(10\.96\.0\.64\/26\)/);
    // A restarted n2 comes back.
    await started('n2', '192.0.2.2');
    await until('n2 back', () => a.peers().has('n2'));
  });

  it('resumes the watch after an etcd member restart, from where it was, without listing again', async () => {
    await registry.create('10.96.0.64/26', 'n2');
    const only = [suite.etcd.localEndpoints[0]!];
    const a = await started('n1', '192.0.2.1', { endpoints: only });
    const b = await started('n2', '192.0.2.2');
    await until('n1 sees n2', () => a.peers().has('n2'));
    await suite.etcd.kill(0);
    await until('n1 knows it lost etcd', () => !a.status().connected);
    // Changes while n1's member is down: a new block of n2's, and n1's own record expires.
    await registry.create('10.96.2.0/26', 'n2');
    await until('n1 withdrawn on n2 after its lease expired', () => !b.peers().has('n1'), 30_000);
    expect(a.status().ready, 'the table stands while etcd is away').to.equal(true);
    expect(prefixesOf(a, 'n2')).to.deep.equal(['10.96.0.64/26']);
    suite.etcd.restart(0);
    await until(
      'n1 sees the block claimed while it was away',
      () => prefixesOf(a, 'n2')?.length === 2,
      60_000,
    );
    expect(prefixesOf(a, 'n2')).to.deep.equal(['10.96.0.64/26', '10.96.2.0/26']);
    expect(a.listCount, 'resumed, not listed again').to.equal(1);
    expect(a.resumeCount).to.be.greaterThan(0);
    expect(a.status().connected).to.equal(true);
    // Its lease was lost meanwhile: it granted a new one and published its record again.
    await until('n1 back on n2', () => b.peers().has('n1'), 30_000);
  });

  it('lists again when etcd compacted the revision the watch would resume from, and the table is right', async () => {
    await registry.create('10.96.0.64/26', 'n2');
    await registry.create('10.96.1.0/26', 'n3');
    const only = [suite.etcd.localEndpoints[1]!];
    const a = await started('n1', '192.0.2.1', { endpoints: only });
    await started('n2', '192.0.2.2');
    const c = await started('n3', '192.0.2.3');
    await until('n1 sees n2 and n3', () => a.peers().has('n2') && a.peers().has('n3'));
    await suite.etcd.kill(1);
    await until('n1 knows it lost etcd', () => !a.status().connected);
    // While n1's watch is down: n2 gains a block and loses one, n3 leaves for good (its record
    // deleted outright), and the history of all that is compacted away.
    await registry.create('10.96.2.0/26', 'n2');
    await registry.release('10.96.0.64/26', 'n2');
    await stopNode(c);
    await suite.client.delete().key(`${suite.prefix}/nodes/n3`).exec();
    const rev = await suite.etcd.revision();
    await suite.client.put('/compaction-filler').value('x').exec();
    suite.etcd.etcdctl('compact', String(rev));
    suite.etcd.restart(1);
    await until('n1 listed again', () => a.listCount === 2, 60_000);
    await until('n1 connected', () => a.status().connected);
    expect([...a.peers().keys()].sort()).to.deep.equal(['n2']);
    expect(prefixesOf(a, 'n2')).to.deep.equal(['10.96.2.0/26']);
    // n3's block has no record now: reported, not routed.
    expect(a.status().reasons.join('\n')).to.match(/n3 \(10\.96\.1\.0\/26\)/);
    // And it follows changes again after the list.
    await registry.create('10.96.3.0/26', 'n2');
    await until('new block after the list', () => prefixesOf(a, 'n2')?.length === 2);
  });

  it('lists more keys than one page holds, at one revision', async () => {
    for (let i = 0; i < 16; i++) await registry.create(`10.96.${i >> 2}.${(i & 3) * 64}/26`, `m${i}`);
    const ops = Array.from({ length: 16 }, (_, i) =>
      suite.client
        .put(`${suite.prefix}/nodes/m${i}`)
        .value(JSON.stringify(record(`m${i}`, `192.0.2.${10 + i}`)))
        .lease(testLease()),
    );
    await suite.client
      .if(`${suite.prefix}/nodes/m0`, 'Create', '==', 0)
      .then(...ops)
      .commit();
    const a = await source('n1', { listPage: 5 });
    await a.start(record('n1', '192.0.2.1'));
    await until('n1 synced', () => a.synced);
    expect(a.peers().size).to.equal(16);
    for (let i = 0; i < 16; i++)
      expect(prefixesOf(a, `m${i}`)).to.deep.equal([`10.96.${i >> 2}.${(i & 3) * 64}/26`]);
    expect(a.listCount).to.equal(1);
  });

  it('writes its record again when it is deleted by hand while the daemon lives', async () => {
    const a = await started('n1', '192.0.2.1');
    const b = await started('n2', '192.0.2.2');
    await until('n2 sees n1', () => b.peers().has('n1'));
    await suite.client.delete().key(`${suite.prefix}/nodes/n1`).exec();
    await until(
      'record back',
      async () => (await suite.client.get(`${suite.prefix}/nodes/n1`).string()) !== null,
    );
    await until('n2 sees n1 again', () => b.peers().has('n1'));
    expect(a.status().reasons).to.deep.equal([]);
  });

  it("carries a node's DPU endpoints, dropping and reporting a prefix outside the node's own blocks", async () => {
    await registry.create('10.96.0.64/26', 'n2');
    await registry.create('10.96.1.0/26', 'n3');
    const a = await started('n1', '192.0.2.1');
    const b = await source('n2');
    const { vtep: _none, ...hostless } = record('n2', '192.0.2.2');
    const dpus = {
      ...hostless,
      endpoints: [
        {
          id: 'dpu-0',
          underlay: '192.0.2.20',
          mtu: 1500,
          vtep: { mac: '0e:77:c0:00:02:14', vni: 30574, port: 4789 },
          // Its slice, a borrowed /32, and a slice of n3's block it has no right to.
          prefixes: ['10.96.0.64/28', '10.96.0.100/32', '10.96.1.0/28'],
        },
      ],
    };
    await b.start(dpus);
    await until('n1 sees n2 with its endpoint', () => a.peers().get('n2')?.endpoints !== undefined);
    expect(a.peers().get('n2')).to.deep.equal({
      ...hostless,
      endpoints: [{ ...dpus.endpoints[0]!, prefixes: ['10.96.0.64/28', '10.96.0.100/32'] }],
      prefixes: ['10.96.0.64/26'],
    });
    expect(a.status().rejected).to.deep.equal([
      'node n2: endpoint dpu-0 claims 10.96.1.0/28, which is not inside the blocks it owns (10.96.0.64/26); prefix ignored',
    ]);
    // Once n2 owns that block too, the slice is its to give.
    await suite.client.put(`${suite.prefix}/blocks/10.96.1.0-26`).value('n2').exec();
    await until('slice accepted', () => a.peers().get('n2')?.endpoints?.[0]?.prefixes.length === 3);
    expect(a.status().rejected).to.deep.equal([]);
  });

  it('reads a record written before endpoints existed, and refuses a malformed endpoint list whole', async () => {
    await registry.create('10.96.0.64/26', 'old');
    await registry.create('10.96.0.128/26', 'bad');
    const a = await started('n1', '192.0.2.1');
    await suite.client
      .put(`${suite.prefix}/nodes/old`)
      .lease(testLease())
      .value('{"node":"old","underlay":["192.0.2.7"],"mtu":1500,"bootId":"b"}')
      .exec();
    await suite.client
      .put(`${suite.prefix}/nodes/bad`)
      .lease(testLease())
      .value(JSON.stringify({ ...record('bad', '192.0.2.8'), endpoints: [{ id: 'x', underlay: 'nowhere' }] }))
      .exec();
    await until('old read', () => a.peers().has('old'));
    await until('bad refused', () => a.status().rejected.length === 1);
    expect(a.peers().get('old')).to.deep.equal({
      node: 'old',
      underlay: ['192.0.2.7'],
      mtu: 1500,
      bootId: 'b',
      prefixes: ['10.96.0.64/26'],
    });
    expect(a.peers().has('bad')).to.equal(false);
    expect(a.status().rejected[0]).to.match(
      /^node bad: its record has an invalid endpoint list: endpoints\[0\]\.underlay must be one IP address: .*; record ignored$/,
    );
  });

  it('update() puts the changed record under the same lease, and a peer never sees the node withdrawn', async () => {
    const [a, b] = await n1SeesN2();
    const key = `${suite.prefix}/nodes/n2`;
    const before = (await suite.client.get(key).exec()).kvs[0]!;
    // Every event of the key, from the record as it is now: a delete would be a withdrawal.
    const events: string[] = [];
    const watcher = await suite.client
      .watch()
      .key(key)
      .startRevision(String(Number(before.mod_revision) + 1))
      .create();
    watcher.on('put', (kv) => events.push(`put lease ${kv.lease}`));
    watcher.on('delete', () => events.push('delete'));
    let withdrawn = false;
    a.onChange(() => {
      if (!a.peers().has('n2')) withdrawn = true;
    });
    const endpoint = tunnelEndpoint('dpu-0', 20, ['10.96.0.64/28']);
    for (let i = 0; i < 5; i++) {
      await b.update({
        ...record('n2', '192.0.2.2'),
        endpoints: [{ ...endpoint, prefixes: [`10.96.0.${64 + i}/32`] }],
      });
      await until(
        `n1 sees update ${i}`,
        () => a.peers().get('n2')?.endpoints?.[0]?.prefixes[0] === `10.96.0.${64 + i}/32`,
      );
    }
    // The same record again writes nothing.
    const rev = (await suite.client.get(key).exec()).kvs[0]!.mod_revision;
    await b.update({
      ...record('n2', '192.0.2.2'),
      endpoints: [{ ...endpoint, prefixes: ['10.96.0.68/32'] }],
    });
    expect((await suite.client.get(key).exec()).kvs[0]!.mod_revision).to.equal(rev);
    await until('five puts seen', () => events.length >= 5);
    await watcher.cancel();
    expect(events).to.deep.equal(Array.from({ length: 5 }, () => `put lease ${before.lease}`));
    expect(withdrawn, 'n2 never left n1').to.equal(false);
    expect(b.status().reasons).to.deep.equal([]);
    // The lease is still kept alive: the record outlives several TTLs.
    await new Promise((r) => setTimeout(r, TTL * 1500));
    expect((await suite.client.get(key).exec()).kvs[0]?.lease).to.equal(before.lease);
  });

  it('update() refuses a record other nodes would ignore, and keeps the one published', async () => {
    const a = await started('n1', '192.0.2.1');
    await until('published', () => a.status().reasons.length === 0);
    let err: Error | undefined;
    await a
      .update({
        ...record('n1', '192.0.2.1'),
        endpoints: [
          {
            id: 'bad id',
            underlay: '192.0.2.9',
            mtu: 1500,
            vtep: { mac: '0e:77:c0:00:02:09', vni: 30574, port: 4789 },
            prefixes: [],
          },
        ],
      })
      .catch((e: Error) => (err = e));
    expect(err?.message).to.match(
      /this node's record has an invalid endpoint list: endpoints\[0\]\.id must be/,
    );
    expect(JSON.parse((await suite.client.get(`${suite.prefix}/nodes/n1`).string())!)).to.deep.equal({
      ...record('n1', '192.0.2.1'),
      holder: { store: 'store-of-n1', boot: currentBootId() },
    });
  });

  it('a restart of the same daemon (same boot) takes over its own live record at once', async () => {
    const a = await started('n1', '192.0.2.1');
    const b = await started('n2', '192.0.2.2');
    await until('n2 sees n1', () => b.peers().has('n1'));
    const oldLease = (await suite.client.get(`${suite.prefix}/nodes/n1`).exec()).kvs[0]!.lease;
    await stopNode(a);
    let withdrawn = false;
    b.onChange(() => {
      if (!b.peers().has('n1')) withdrawn = true;
    });
    const again = await started('n1', '192.0.2.1');
    await until('published again', () => again.status().reasons.length === 0);
    const kv = (await suite.client.get(`${suite.prefix}/nodes/n1`).exec()).kvs[0]!;
    expect(kv.lease, 'under the new lease').to.not.equal(oldLease);
    const hex = BigInt(oldLease).toString(16);
    await until('the old lease expired', () =>
      /already expired/.test(suite.etcd.etcdctl('lease', 'timetolive', hex)),
    );
    expect(b.peers().has('n1')).to.equal(true);
    expect(withdrawn, 'never withdrawn across the restart').to.equal(false);
    expect((await suite.client.get(`${suite.prefix}/nodes/n1`).exec()).kvs[0]!.lease).to.equal(kv.lease);
  });
});
