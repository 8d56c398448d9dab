import { expect } from 'chai';
import { describeEtcd } from '../support/etcd-suite';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Etcd3 } from 'etcd3';
import { BlockRegistry } from '../../../sources/etcd/block-registry';
import { CLI } from '../../support/daemon-process';
import { NetnsSet } from '../../support/netns';
import { EtcdCluster } from '../../support/etcd-cluster';
import {
  attach,
  detach,
  eventually,
  grpcCode,
  inBlock,
  restartNode,
  startEtcdNode,
  status,
  type PoolNode,
} from '../support/pool-nodes';

// The etcd pool source against a real 3-member etcd cluster (Debian's etcd-server) on the loopback of
// a test-owned namespace, with real daemons as separate nodes, each programming its own node namespace
// with the Linux backend. Block ownership is read back from etcd itself.

const V4 = '10.96.0.0/22'; // 16 blocks of /26
const V6 = 'fd96::/112'; // /122 blocks

describeEtcd('etcd pool source (root, real 3-member etcd cluster, daemons as nodes)', function () {
  this.timeout(180_000);
  const namespaces = new NetnsSet('wn-pools-');
  let root: string;
  let etcd: EtcdCluster;
  let registry: BlockRegistry;
  let client: Etcd3 | undefined;
  const nodes: PoolNode[] = [];
  let seq = 0;

  /** A fresh workload namespace. */
  const workload = (): { id: string; path: string } => ({ id: `w${seq++}`, path: namespaces.add().path });

  /** Blocks of `node` according to etcd. */
  async function blocksOf(node: string): Promise<string[]> {
    return [...(await registry.blocks())].filter(([, n]) => n === node).map(([b]) => b);
  }

  async function waitReady(n: PoolNode): Promise<void> {
    await eventually(`${n.name} connected with a block of each family`, async () => {
      const st = await status(n.daemon);
      return (
        st.ready &&
        st.poolSource?.connected === true &&
        st.pools.some((p) => p.family === 4) &&
        st.pools.some((p) => p.family === 6)
      );
    });
  }

  function cli(...args: string[]): { code: number; stdout: string; stderr: string } {
    const r = spawnSync(
      process.execPath,
      [CLI, 'cluster', ...args, '--etcd-endpoints', etcd.localEndpoints.join(',')],
      {
        encoding: 'utf8',
      },
    );
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  }

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-pools-'));
    etcd = await EtcdCluster.start(path.join(root, 'etcd'));
    client = etcd.client();
    registry = new BlockRegistry(client, '/workloadnet');
    for (const name of ['node-a', 'node-b', 'node-c'])
      nodes.push(await startEtcdNode(name, root, etcd, namespaces, [V4, V6]));
    for (const n of nodes) await waitReady(n);
  });

  after(async () => {
    for (const n of nodes) await n.daemon.stop().catch(() => undefined);
    client?.close();
    await etcd?.stop();
    namespaces.cleanup();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('never hands out one address twice across three nodes attaching at once, each from a block it owns', async () => {
    const perNode = 30;
    const results = await Promise.all(
      nodes.map(async (n) => {
        const ws = Array.from({ length: perNode }, workload);
        const ips = await Promise.all(ws.map((w) => attach(n.daemon, w.id, w.path)));
        return { node: n.name, ips: ips.flat() };
      }),
    );
    const all = results.flatMap((r) => r.ips);
    expect(all).to.have.length(nodes.length * perNode * 2);
    expect(new Set(all).size, 'every address once').to.equal(all.length);
    for (const r of results) {
      const owned = await blocksOf(r.node);
      for (const ip of r.ips)
        expect(
          owned.some((b) => inBlock(ip, b)),
          `${ip} lies in a block ${r.node} owns (${owned.join(', ')})`,
        ).to.equal(true);
    }
    // Status lists one pool per owned block, each from the etcd source.
    const st = await status(nodes[0]!.daemon);
    expect(st.pools.map((p) => p.cidr).sort()).to.deep.equal((await blocksOf('node-a')).sort());
    expect(st.pools.every((p) => p.source === 'etcd' && p.state === 'active')).to.equal(true);
    expect(st.poolSource?.kind).to.equal('etcd');
  });

  it('lists block ownership cluster-wide (cluster blocks --json)', async () => {
    const r = cli('blocks', '--json');
    expect(r.code, r.stderr).to.equal(0);
    const out = JSON.parse(r.stdout) as {
      blocks: Array<{ block: string; node: string; nodeAlive: boolean }>;
    };
    const fromEtcd = await registry.blocks();
    expect(out.blocks.map((b) => [b.block, b.node]).sort()).to.deep.equal([...fromEtcd].sort());
    expect(out.blocks.every((b) => b.nodeAlive)).to.equal(true);
  });

  it("refuses a second daemon with a live daemon's node name: it serves none of its addresses, and its stop leaves the first one's alive key", async () => {
    const first = nodes[0]!;
    const aliveKey = `/workloadnet/nodes/${first.name}/alive`;
    const held = await client!.get(aliveKey).string();
    expect(held, 'the first holds its alive key').to.be.a('string');
    // A cloned VM or a reused host name: another state directory, the same --node-name.
    const clone = await startEtcdNode(first.name, root, etcd, namespaces, [V4, V6], [], 'node-a-clone');
    try {
      await eventually('the clone refused', async () =>
        /node name node-a is held by/.test((await status(clone.daemon)).reasons.join(' ')),
      );
      const st = await status(clone.daemon);
      expect(st.ready).to.equal(false);
      expect(st.reasons.join(' ')).to.match(
        /held by the daemon of store \S+ on host .*: this daemon serves and claims none of node-a's blocks; give one of the two daemons another --node-name/,
      );
      expect(st.pools, "none of node-a's blocks").to.deep.equal([]);
      const w = workload();
      const err = await attach(clone.daemon, w.id, w.path).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(grpcCode(err), String(err)).to.equal(grpc.status.UNAVAILABLE);
      expect(String(err)).to.match(/node name node-a is held by/);
      expect(await client!.get(aliveKey).string(), 'the clone wrote nothing').to.equal(held);
    } finally {
      await clone.daemon.stop();
    }
    expect(await client!.get(aliveKey).string(), "the clone's stop left the first one's key").to.equal(held);
    const w = workload();
    const ips = await attach(first.daemon, w.id, w.path);
    const owned = await blocksOf(first.name);
    for (const ip of ips) expect(owned.some((b) => inBlock(ip, b))).to.equal(true);
  });

  it('takes its own alive key back when restarted after SIGKILL while its old lease still lives', async () => {
    const n = nodes[1]!;
    const aliveKey = `/workloadnet/nodes/${n.name}/alive`;
    const read = async (): Promise<{ value: string; lease: string; created: string } | undefined> => {
      const kv = (await client!.get(aliveKey).exec()).kvs[0];
      return (
        kv && { value: kv.value.toString(), lease: String(kv.lease), created: String(kv.create_revision) }
      );
    };
    const before = (await read())!;
    await n.daemon.kill('SIGKILL');
    // The killed daemon's lease lives on, whatever the time the restart takes: the test keeps it alive.
    const keeper = await client!.leaseClient.leaseKeepAlive();
    keeper.on('data', () => undefined);
    const keep = (): void => void keeper.write({ ID: before.lease });
    keep();
    const ticker = setInterval(keep, 1000);
    try {
      await restartNode(n, etcd.netns);
      await waitReady(n);
      const now = (await read())!;
      expect(now.value, 'written by the restarted daemon').to.not.equal(before.value);
      expect(now.lease).to.not.equal(before.lease);
      expect(now.created, 'taken over, not deleted and made again').to.equal(before.created);
    } finally {
      clearInterval(ticker);
      keeper.end();
    }
    const w = workload();
    await attach(n.daemon, w.id, w.path);
    // The old lease expiring deletes nothing of the restarted daemon's.
    await eventually(
      'the old lease expired',
      async () => Number((await client!.leaseClient.leaseTimeToLive({ ID: before.lease })).TTL) < 0,
    );
    const after = await read();
    expect(after, 'the key is still there').to.not.equal(undefined);
    expect(after!.lease).to.not.equal(before.lease);
  });

  it('grows the etcd revision with block claims, not with attaches and detaches', async () => {
    const n = nodes[0]!;
    const blocksBefore = (await registry.blocks()).size;
    const revBefore = await etcd.revision();
    const ws = Array.from({ length: 40 }, workload);
    for (const w of ws) await attach(n.daemon, w.id, w.path);
    for (const w of ws) await detach(n.daemon, w.id);
    const claims = (await registry.blocks()).size - blocksBefore;
    const revAfter = await etcd.revision();
    // One transaction per claimed block; 80 API calls added no other write.
    expect(revAfter - revBefore).to.equal(claims);
    expect(claims).to.be.lessThan(ws.length / 4);
  });

  it('keeps attaching, claims included, with one etcd member killed', async () => {
    await etcd.kill(0);
    try {
      const n = nodes[1]!;
      const before = (await blocksOf(n.name)).length;
      // Enough to need at least one more IPv4 block.
      const ws = Array.from({ length: 70 }, workload);
      for (const w of ws) await attach(n.daemon, w.id, w.path);
      expect((await blocksOf(n.name)).length).to.be.greaterThan(before);
    } finally {
      etcd.restart(0);
      await etcd.waitHealthy();
    }
  });

  it('with every member down, attaches from owned blocks succeed and the rest fail UNAVAILABLE promptly; claims resume when etcd is back', async () => {
    const n = nodes[2]!;
    await etcd.killAll();
    try {
      const st = await status(n.daemon);
      const free = (family: number): number =>
        st.pools
          .filter((p) => p.family === family && p.state === 'active')
          .reduce((s, p) => s + p.size - p.used, 0);
      const room = Math.min(free(4), free(6));
      expect(room).to.be.greaterThan(0);
      for (let i = 0; i < room; i++) {
        const w = workload();
        await attach(n.daemon, w.id, w.path);
      }
      const w = workload();
      const started = Date.now();
      const err = await attach(n.daemon, w.id, w.path).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(grpcCode(err), String(err)).to.equal(grpc.status.UNAVAILABLE);
      // "Promptly": within the claim timeout (3 s) plus slack, far below the API deadline of 20 s.
      expect(Date.now() - started).to.be.lessThan(10_000);
      const down = await status(n.daemon);
      expect(down.poolSource?.connected).to.equal(false);
      expect(down.poolSource?.reasons.join(' ')).to.match(/etcd is unreachable/);

      // What the node held while etcd was down, from its own view: once etcd is back the node may claim
      // before this test could read etcd, so "the blocks before" are not etcd's after the restart.
      const heldWhileDown = down.pools.map((p) => p.cidr);
      await etcd.restartAll();
      let ips: string[] = [];
      await eventually(
        'an attach that needs a new block to succeed after etcd is back',
        async () => {
          ips = await attach(n.daemon, w.id, w.path);
          return true;
        },
        30_000,
      );
      const after = await blocksOf(n.name);
      for (const ip of ips)
        expect(
          after.some((b) => inBlock(ip, b)),
          `${ip} in an owned block`,
        ).to.equal(true);
      const fromNewBlock = ips.filter((ip) => !heldWhileDown.some((b) => inBlock(ip, b)));
      expect(fromNewBlock, `${ips.join(', ')} against ${heldWhileDown.join(', ')}`).to.not.deep.equal([]);
    } finally {
      await etcd.restartAll();
    }
  });

  it('keeps its blocks across a SIGKILL and restart, serving from its cache with etcd down, and re-attach returns the same address', async () => {
    const n = nodes[0]!;
    const w = workload();
    const first = await attach(n.daemon, w.id, w.path);
    const owned = (await blocksOf(n.name)).sort();
    await n.daemon.kill('SIGKILL');
    await etcd.killAll();
    try {
      await restartNode(n, etcd.netns);
      const st = await status(n.daemon);
      expect(st.ready, st.reasons.join('; ')).to.equal(true);
      expect(st.poolSource?.connected).to.equal(false);
      expect(st.pools.map((p) => p.cidr).sort()).to.deep.equal(owned);
      expect(await attach(n.daemon, w.id, w.path)).to.deep.equal(first);
      const other = workload();
      const ips = await attach(n.daemon, other.id, other.path);
      for (const ip of ips) expect(owned.some((b) => inBlock(ip, b))).to.equal(true);
    } finally {
      await etcd.restartAll();
    }
    await eventually('reconnected', async () => (await status(n.daemon)).poolSource?.connected === true);
    expect((await blocksOf(n.name)).sort()).to.deep.equal(owned);
  });

  it('gives an empty block back after the grace period, keeping one per family', async () => {
    const d = await startEtcdNode(
      'node-d',
      root,
      etcd,
      namespaces,
      [V4, V6],
      ['--empty-block-grace-seconds', '1'],
    );
    nodes.push(d);
    await waitReady(d);
    const ws = Array.from({ length: 60 }, workload);
    for (const w of ws) await attach(d.daemon, w.id, w.path);
    await eventually('a second block claimed ahead', async () => (await blocksOf('node-d')).length >= 3);
    for (const w of ws) await detach(d.daemon, w.id);
    await eventually(
      'blocks given back down to one per family',
      async () => (await blocksOf('node-d')).length === 2,
    );
    const st = await status(d.daemon);
    expect(st.pools.map((p) => p.cidr).sort()).to.deep.equal((await blocksOf('node-d')).sort());
  });

  it("refuses to release a live node's blocks without --force, and releases a stopped node's", async () => {
    const d = nodes[3]!;
    const refused = cli('release-node', 'node-d');
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.match(/node-d is alive/);
    expect(await blocksOf('node-d')).to.have.length(2);

    await d.daemon.stop(); // a clean stop revokes the alive lease; the blocks stay owned
    nodes.pop();
    expect(await blocksOf('node-d')).to.have.length(2);
    const released = cli('release-node', 'node-d', '--json');
    expect(released.code, released.stderr).to.equal(0);
    expect((JSON.parse(released.stdout) as { released: string[] }).released).to.have.length(2);
    expect(await blocksOf('node-d')).to.deep.equal([]);
  });

  it('releases a live node with --force, and that node claims back the blocks its running workloads use', async () => {
    const n = nodes[2]!;
    const inUse = (await status(n.daemon)).pools
      .filter((p) => p.used > 0)
      .map((p) => p.cidr)
      .sort();
    expect(inUse.length).to.be.greaterThan(0);
    const r = cli('release-node', n.name, '--force', '--json');
    expect(r.code, r.stderr).to.equal(0);
    expect((JSON.parse(r.stdout) as { released: string[] }).released).to.include.members(inUse);
    // Its periodic check with etcd finds them gone while addresses in them are in use: it takes them
    // back rather than leave them to another node (what calico#5044 got wrong).
    await eventually('blocks in use owned again', async () => {
      const owned = await blocksOf(n.name);
      return inUse.every((b) => owned.includes(b));
    });
  });
});
