import { expect } from 'chai';
import type { FabricSettings, LocalNode } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { ip, ipJson } from '../../support/netns-fixture';
import {
  CLUSTER,
  FabricTopology,
  kernelState,
  settings,
  type TopologyNode,
} from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { netnsPath } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';

// The Linux fabric against the real kernel, beside fabric.test.ts: dual-stack pods over VXLAN across
// the router, then what the fabric finds of the underlay, how it adopts or recreates its device and
// what it refuses, changing nothing.

describeRoot('Linux fabric: dual-stack pods over VXLAN on an IPv4 underlay', function () {
  this.timeout(60_000);
  const topo = new FabricTopology();
  const fabrics: LinuxFabric[] = [];
  let peers: Peer[][] = [];

  before(async () => {
    await topo.build([nodeSpec('n6a', 1, 1, { v6: true }), nodeSpec('n6c', 2, 3, { v6: true })]);
    const locals = new Map<string, LocalNode>();
    for (const n of topo.nodes) {
      const f = new LinuxFabric({ hostNetnsPath: netnsPath(n.ns), monitor: false });
      fabrics.push(f);
      locals.set(n.name, await f.prepare(settings('vxlan', { clusterCidrs: [CLUSTER, 'fd10::/32'] })));
    }
    peers = topo.nodes.map((n) => topo.peersOf(n.name, locals));
    for (const [i] of topo.nodes.entries()) await fabrics[i]?.apply(peers[i] ?? []);
  });

  after(async () => {
    for (const f of fabrics) await f.stop();
    await topo.cleanup();
  });

  it('programs an IPv6 route, neighbour and catch-all beside the IPv4 ones, one FDB entry for both', async () => {
    const ns = topo.node('n6a').ns;
    const v6 = (await ip('-n', ns, '-6', 'route', 'show', 'proto', '119'))
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .sort();
    expect(v6).to.deep.equal([
      'fd10:0:3::/64 via fd10:0:3:: dev wn-vxlan metric 1024 onlink mtu 1450 pref medium',
      'unreachable fd10::/32 dev lo metric 4294967295 pref medium',
    ]);
    expect((await kernelState(ns)).fdb).to.deep.equal(['0e:77:0a:64:02:03 dst 10.100.2.3 self permanent']);
    expect(
      (await ip('-n', ns, '-6', 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent')).trim(),
    ).to.equal('fd10:0:3:: lladdr 0e:77:0a:64:02:03 PERMANENT');
  });

  it('a second apply of the same peers changes nothing (the IPv6 catch-all reads back with dev lo)', async () => {
    const ns = topo.node('n6a').ns;
    const before = await ip('-n', ns, '-6', 'route', 'show', 'proto', '119');
    const report = await fabrics[0]?.apply(peers[0] ?? []);
    expect(report?.repairs, 'nothing was put back').to.equal(0);
    expect(report?.objects).to.deep.equal({ routes: 4, neighbours: 2, fdb: 1 });
    expect(await ip('-n', ns, '-6', 'route', 'show', 'proto', '119')).to.equal(before);
  });

  it('a restart adopts the device as it is: alias set since its creation, permanent neighbours kept before any apply', async () => {
    const ns = topo.nodes[0]!.ns;
    const neighbours = async (): Promise<string> =>
      (await ip('-n', ns, 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent')).trim();
    const before = await neighbours();
    expect(before, 'the peers are programmed').to.not.equal('');
    const [link] = await ipJson<{ ifalias?: string; ifindex: number }>(ns, 'link', 'show', 'wn-vxlan');
    // What a restarted daemon does first: prepare, and only after its first full list, apply.
    const again = new LinuxFabric({ hostNetnsPath: netnsPath(ns), monitor: false });
    try {
      await again.prepare(settings('vxlan', { clusterCidrs: [CLUSTER, 'fd10::/32'] }));
      expect(await neighbours(), 'no neighbour flushed by adopting the device').to.equal(before);
      const [same] = await ipJson<{ ifindex: number }>(ns, 'link', 'show', 'wn-vxlan');
      expect(same?.ifindex).to.equal(link?.ifindex);
      expect(link?.ifalias, 'the alias set when the device was created').to.equal('workloadnet fabric');
    } finally {
      await again.stop();
    }
  });

  it('carries IPv6 and IPv4 between pods across the router', async () => {
    const a = topo.node('n6a');
    const c = topo.node('n6c');
    const opts = { count: 3, waitSeconds: 2, intervalSeconds: 0.2 };
    expect(await pings(a.pod, c.podIp6 ?? '', opts), 'IPv6 a → c').to.equal(true);
    expect(await pings(c.pod, a.podIp6 ?? '', opts), 'IPv6 c → a').to.equal(true);
    expect(await pings(a.pod, c.podIp, opts), 'IPv4 a → c').to.equal(true);
  });
});

describeRoot('Linux fabric: the underlay, the device and what it refuses', function () {
  this.timeout(60_000);
  const topo = new FabricTopology();
  let node: TopologyNode;

  before(async () => {
    await topo.build([nodeSpec('nd', 1, 4)]);
    node = topo.node('nd');
  });

  after(() => topo.cleanup());

  /**
   * Links, every route of every table and the permanent neighbours, less what the kernel adds by itself
   * at any moment (an IPv6 link-local address appears once its duplicate detection ends).
   */
  async function snapshot(): Promise<string> {
    return [
      await ip('-n', node.ns, '-d', 'link', 'show'),
      await ip('-n', node.ns, 'route', 'show', 'table', 'all'),
      await ip('-n', node.ns, 'neigh', 'show', 'nud', 'permanent'),
    ]
      .join('\n')
      .split('\n')
      .filter((l) => !/^local fe80::/.test(l))
      .join('\n');
  }

  it("the backend's fabric finds the underlay in its host namespace: the default route's interface, or --node-ip", async () => {
    await ip('-n', node.ns, 'addr', 'add', '10.100.9.4/24', 'dev', 'eth0');
    try {
      const fabric = node.backend.fabric;
      expect(await fabric.prepare(settings('vxlan'))).to.deep.equal({
        underlay: ['10.100.1.4'],
        uplink: 'eth0',
        mtu: 1500,
        subnets: ['10.100.1.0/24', '10.100.9.0/24'],
        vtep: { mac: '0e:77:0a:64:01:04', vni: 30574, port: 4789 },
      });
      const local = await fabric.prepare(settings('routed', { nodeIp: '10.100.9.4' }));
      expect(local.underlay).to.deep.equal(['10.100.9.4']);
      expect(local.vtep).to.equal(undefined);
      await fabric.stop();
    } finally {
      await ip('-n', node.ns, 'addr', 'del', '10.100.9.4/24', 'dev', 'eth0');
      await ip('-n', node.ns, 'link', 'del', 'wn-vxlan').catch(() => undefined);
    }
  });

  it('a foreign VXLAN device on port 4789: refused, naming it, nothing changed', async () => {
    await ip(
      '-n',
      node.ns,
      'link',
      'add',
      'flannel.1',
      'type',
      'vxlan',
      'id',
      '1',
      'dstport',
      '4789',
      'dev',
      'eth0',
      'nolearning',
    );
    const before = await snapshot();
    const f = new LinuxFabric({ hostNetnsPath: netnsPath(node.ns), monitor: false });
    try {
      const err = await f.prepare(settings('vxlan')).then(
        () => undefined,
        (e: unknown) => e as { code?: string; message: string },
      );
      expect(err?.code).to.equal('FAILED_PRECONDITION');
      expect(err?.message).to.match(/UDP port 4789 is already used by VXLAN device flannel\.1/);
      expect(await snapshot()).to.equal(before);
    } finally {
      await f.stop();
      await ip('-n', node.ns, 'link', 'del', 'flannel.1');
    }
  });

  it('bad settings: a clear error and nothing changed', async () => {
    const before = await snapshot();
    const f = new LinuxFabric({ hostNetnsPath: netnsPath(node.ns), monitor: false });
    try {
      const cases: Array<[Partial<FabricSettings>, RegExp]> = [
        [{ vni: 0 }, /VNI must be an integer in 1\.\.16777215, not 0/],
        [{ port: 70000 }, /port must be an integer in 1\.\.65535, not 70000/],
        [{ clusterCidrs: ['10.244.0.1/16'] }, /cluster CIDR: 10\.244\.0\.1\/16 has host bits set/],
        [{ nodeIp: '10.9.9.9' }, /node IP 10\.9\.9\.9 is not an address of any interface/],
      ];
      for (const [bad, why] of cases) {
        const err = await f.prepare(settings('vxlan', bad)).then(
          () => undefined,
          (e: unknown) => e as { code?: string; message: string },
        );
        expect(err?.message, JSON.stringify(bad)).to.match(why);
        expect(err?.code).to.be.oneOf(['INVALID_ARGUMENT', 'FAILED_PRECONDITION']);
      }
      expect(await snapshot()).to.equal(before);
    } finally {
      await f.stop();
    }
  });

  it('adopts its own device with other settings only by recreating it, and a matching one untouched', async () => {
    const f = new LinuxFabric({ hostNetnsPath: netnsPath(node.ns), monitor: false });
    try {
      await f.prepare(settings('vxlan'));
      const [first] = await ipJson<{ ifindex: number }>(node.ns, 'link', 'show', 'wn-vxlan');
      await f.prepare(settings('vxlan'));
      const [same] = await ipJson<{ ifindex: number }>(node.ns, 'link', 'show', 'wn-vxlan');
      expect(same?.ifindex).to.equal(first?.ifindex);
      await f.prepare(settings('vxlan', { vni: 4242 }));
      const [next] = await ipJson<{ ifindex: number; linkinfo: { info_data: { id: number } } }>(
        node.ns,
        '-d',
        'link',
        'show',
        'wn-vxlan',
      );
      expect(next?.ifindex).to.not.equal(first?.ifindex);
      expect(next?.linkinfo.info_data.id).to.equal(4242);
    } finally {
      await f.stop();
    }
  });
});
