import { expect } from 'chai';
import { spawn } from 'node:child_process';
import type { LocalNode } from '../../../core/fabric-dataplane';
import type { Peer, TunnelEndpoint } from '../../../core/peer-source';
import { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { vtepMac } from '../../../lib/vtep-mac';
import { ip, ipJson, netnsExec } from '../../support/netns-fixture';
import {
  FabricTopology,
  bridge,
  kernelState,
  settings,
  type TopologyNode,
} from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { netnsPath } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { waitUntil } from '../../support/wait-until';

// A Linux node and a node whose pods sit behind two DPUs, in one peer table (a mixed cluster). Each
// "DPU" is a bare namespace on the underlay across the router, with a kernel VXLAN device of its own
// programmed here by hand (its VTEP), pods behind it in namespaces of their own, and a route back to
// the Linux node's prefix through the Linux node's VTEP. The Linux node's fabric is given the DPU
// node as a peer with two endpoints, each holding a slice and a borrowed /32.

interface Dpu {
  ns: string;
  address: string;
  mac: string;
}

describeRoot('Linux fabric to a peer whose pods sit behind DPU endpoints (real kernel)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  let na: TopologyNode;
  let fabric: LinuxFabric;
  let local: LocalNode;
  let da: Dpu;
  let db: Dpu;

  /** A DPU namespace with its VTEP, the Linux node as its one peer, and a pod per address behind it. */
  async function dpu(name: string, host: number, pods: string[], subnet: 1 | 2 = 2): Promise<Dpu> {
    const { ns, address } = await topo.addBareNode({ name, subnet, host });
    const mac = vtepMac(address);
    const x = (...args: string[]): Promise<string> => ip('-n', ns, ...args);
    await netnsExec(ns, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1');
    await x(
      'link',
      'add',
      'vx',
      'address',
      mac,
      'mtu',
      '1450',
      'type',
      'vxlan',
      'id',
      '30574',
      'dstport',
      '4789',
      'local',
      address,
      'dev',
      'eth0',
      'nolearning',
    );
    await x('link', 'set', 'vx', 'up');
    // Back to the Linux node's pods: its prefix through its VTEP, as the fabric would program it.
    const naMac = local.vtep!.mac;
    await x('neigh', 'add', '10.244.1.0', 'lladdr', naMac, 'dev', 'vx', 'nud', 'permanent');
    await bridge(ns, 'fdb', 'append', naMac, 'dev', 'vx', 'dst', na.address, 'self', 'permanent');
    // On the Linux node's subnet, a DPU routes back directly, as the Linux node routes to it in hybrid.
    if (subnet === 1) await x('route', 'add', '10.244.1.0/24', 'via', na.address, 'dev', 'eth0');
    else await x('route', 'add', '10.244.1.0/24', 'via', '10.244.1.0', 'dev', 'vx', 'onlink');
    for (const [i, pod] of pods.entries()) {
      const podNs = topo.pool.add(`${name}p${i}`).name;
      const port = `p${i}`;
      await x('link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', podNs);
      await x('link', 'set', port, 'up');
      // The pod's every neighbour is the DPU: it answers ARP for all of them.
      await netnsExec(ns, 'sysctl', '-q', '-w', `net.ipv4.conf.${port}.proxy_arp=1`);
      await x('route', 'add', `${pod}/32`, 'dev', port);
      await ip('-n', podNs, 'link', 'set', 'lo', 'up');
      await ip('-n', podNs, 'link', 'set', 'eth0', 'mtu', '1450', 'up');
      await ip('-n', podNs, 'addr', 'add', `${pod}/32`, 'dev', 'eth0');
      await ip('-n', podNs, 'route', 'add', 'default', 'dev', 'eth0');
    }
    return { ns, address, mac };
  }

  const endpoint = (id: string, d: Dpu, prefixes: string[]): TunnelEndpoint => ({
    id,
    underlay: d.address,
    mtu: 1500,
    vtep: { mac: d.mac, vni: 30574, port: 4789 },
    prefixes,
  });

  /** The DPU node: no VTEP of its own (its host runs no VXLAN device), its pods behind its DPUs. */
  const dpuNode = (endpoints: TunnelEndpoint[]): Peer => ({
    node: 'nd',
    underlay: ['10.100.2.3'],
    mtu: 1500,
    bootId: '',
    endpoints,
    prefixes: ['10.244.4.0/24'],
  });
  const both = (): TunnelEndpoint[] => [
    endpoint('dpu-a', da, ['10.244.4.0/26', '10.244.4.200/32']),
    endpoint('dpu-b', db, ['10.244.4.64/26', '10.244.4.150/32']),
  ];

  before(async () => {
    await topo.build([nodeSpec('na', 1, 1)]);
    na = topo.node('na');
    fabric = new LinuxFabric({ hostNetnsPath: netnsPath(na.ns), monitor: false });
    local = await fabric.prepare(settings('vxlan'));
    da = await dpu('da', 10, ['10.244.4.5', '10.244.4.200']);
    db = await dpu('db', 11, ['10.244.4.70']);
  });

  after(async () => {
    await fabric?.stop();
    await topo.cleanup();
  });

  it('programs one neighbour and FDB entry per endpoint VTEP and one route per slice and borrowed /32 to it', async () => {
    const report = await fabric.apply([dpuNode(both())]);
    expect(await kernelState(na.ns)).to.deep.equal({
      routes: [
        '10.244.4.0/26 via 10.244.4.0 dev wn-vxlan metric 1024 onlink mtu 1450',
        '10.244.4.150 via 10.244.4.64 dev wn-vxlan metric 1024 onlink mtu 1450',
        '10.244.4.200 via 10.244.4.0 dev wn-vxlan metric 1024 onlink mtu 1450',
        '10.244.4.64/26 via 10.244.4.64 dev wn-vxlan metric 1024 onlink mtu 1450',
        'unreachable 10.244.0.0/16 metric 4294967295',
      ],
      neigh: [`10.244.4.0 lladdr ${da.mac} PERMANENT`, `10.244.4.64 lladdr ${db.mac} PERMANENT`],
      fdb: [`${da.mac} dst ${da.address} self permanent`, `${db.mac} dst ${db.address} self permanent`],
    });
    expect(report.ready).to.equal(true);
    expect(report.objects).to.deep.equal({ routes: 5, neighbours: 2, fdb: 2 });
    const path = report.peers[0]!;
    expect(path.path).to.equal('vxlan');
    // Slices 2 and 3 are held by no DPU, and the node has no VTEP of its own to take them.
    expect(path.reason).to.match(/^unreachable, covered by no endpoint: 10\.244\.4\.128\/28, /);
    // The same table again finds everything in place.
    expect((await fabric.apply([dpuNode(both())])).repairs).to.equal(0);
  });

  it('carries a pod on the Linux node to pods behind each endpoint VTEP, a borrowed /32 included', async () => {
    for (const to of ['10.244.4.5', '10.244.4.200', '10.244.4.70'])
      expect(
        await pings(na.pod, to, { count: 3, waitSeconds: 2, intervalSeconds: 0.2 }),
        `na pod → ${to}`,
      ).to.equal(true);
    // Each DPU's VTEP took the packets for its own pods.
    const rx = async (d: Dpu): Promise<number> => {
      const [link] = await ipJson<{ stats64: { rx: { packets: number } } }>(d.ns, '-s', 'link', 'show', 'vx');
      return link?.stats64.rx.packets ?? 0;
    };
    const before = await rx(db);
    expect(await pings(na.pod, '10.244.4.200', { count: 2, intervalSeconds: 0.2 })).to.equal(true);
    expect(await rx(db), 'the borrowed /32 goes to dpu-a, not dpu-b').to.equal(before);
    // An address of a slice no DPU holds fails at once on the catch-all, never through the default route.
    expect(await pings(na.pod, '10.244.4.130', { waitSeconds: 5 })).to.equal(false);
  });

  it('an endpoint that leaves takes only its own entries; pods behind the other lose no packet meanwhile', async () => {
    const child = spawn('ip', ['netns', 'exec', na.pod, ...'ping -i 0.01 -c 200 -W 2 10.244.4.5'.split(' ')]);
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const done = new Promise<string>((resolve) => child.once('close', () => resolve(out)));
    await waitUntil(() => /bytes from/.test(out), 'the first echo reply');
    const report = await fabric.apply([
      dpuNode([endpoint('dpu-a', da, ['10.244.4.0/26', '10.244.4.200/32'])]),
    ]);
    expect(report.ready).to.equal(true);
    const summary = await done;
    expect(summary, summary).to.match(/200 packets transmitted, 200 received, 0% packet loss/);
    expect(await kernelState(na.ns)).to.deep.equal({
      routes: [
        '10.244.4.0/26 via 10.244.4.0 dev wn-vxlan metric 1024 onlink mtu 1450',
        '10.244.4.200 via 10.244.4.0 dev wn-vxlan metric 1024 onlink mtu 1450',
        'unreachable 10.244.0.0/16 metric 4294967295',
      ],
      neigh: [`10.244.4.0 lladdr ${da.mac} PERMANENT`],
      fdb: [`${da.mac} dst ${da.address} self permanent`],
    });
    expect(await pings(na.pod, '10.244.4.70', { waitSeconds: 5 })).to.equal(false);
  });

  it("hybrid: an endpoint on this node's subnet is routed directly to its own address, the other tunnelled; the device is kept", async () => {
    const [before] = await ipJson<{ ifindex: number }>(na.ns, 'link', 'show', 'wn-vxlan');
    await fabric.stop();
    fabric = new LinuxFabric({ hostNetnsPath: netnsPath(na.ns), monitor: false });
    await fabric.prepare(settings('hybrid'));
    const dc = await dpu('dc', 12, ['10.244.4.80'], 1);
    const report = await fabric.apply([
      dpuNode([
        endpoint('dpu-a', da, ['10.244.4.0/26', '10.244.4.200/32']),
        endpoint('dpu-c', dc, ['10.244.4.64/26']),
      ]),
    ]);
    expect(report.ready).to.equal(true);
    expect(await kernelState(na.ns)).to.deep.equal({
      routes: [
        '10.244.4.0/26 via 10.244.4.0 dev wn-vxlan metric 1024 onlink mtu 1450',
        '10.244.4.200 via 10.244.4.0 dev wn-vxlan metric 1024 onlink mtu 1450',
        `10.244.4.64/26 via ${dc.address} dev eth0 metric 1024 mtu 1450`,
        'unreachable 10.244.0.0/16 metric 4294967295',
      ],
      neigh: [`10.244.4.0 lladdr ${da.mac} PERMANENT`],
      fdb: [`${da.mac} dst ${da.address} self permanent`],
    });
    const [after] = await ipJson<{ ifindex: number }>(na.ns, 'link', 'show', 'wn-vxlan');
    expect(after?.ifindex, 'wn-vxlan not recreated').to.equal(before?.ifindex);
    for (const to of ['10.244.4.80', '10.244.4.5'])
      expect(
        await pings(na.pod, to, { count: 3, waitSeconds: 2, intervalSeconds: 0.2 }),
        `na pod → ${to}`,
      ).to.equal(true);
  });
});
