import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import type { DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { FabricCluster, type ClusterNode } from '../support/fabric-cluster';
import { waitUntil } from '../support/wait-until';

// The pod MTU left to the daemon (no --mtu): two real daemons in VXLAN mode, each in its node namespace
// on a test-owned underlay (a 1500-byte uplink, the nodes on two subnets joined by a router). A pod
// attached through the API gets the fabric's pod MTU on its interface, 1450, and a don't-fragment
// packet of that size crosses the tunnel while one byte more fails in the pod at once. An uplink MTU
// changed while the daemon is away applies to pods attached after the restart, and to those before in
// place: both ends of their pair and their routes that carry an MTU, the same interfaces; so is an
// --mtu set at the next start.

/** The MTU of an interface inside a namespace, as the kernel has it. */
function linkMtu(ns: string, ifName: string): number {
  const out = execFileSync('ip', ['-n', ns, '-o', 'link', 'show', 'dev', ifName], { encoding: 'utf8' });
  return Number(/ mtu (\d+) /.exec(out)?.[1]);
}

/** A pod's interface index and, from its "eth0@ifN", its host end's. */
function linkIndexes(ns: string): { own: number; peer: number } {
  const out = execFileSync('ip', ['-n', ns, '-o', 'link', 'show', 'dev', 'eth0'], { encoding: 'utf8' });
  const m = /^(\d+): eth0@if(\d+):/.exec(out);
  return { own: Number(m?.[1]), peer: Number(m?.[2]) };
}

/** The MTU of the host interface with this index in the node namespace. */
function hostLinkMtu(ns: string, index: number): number {
  const line = execFileSync('ip', ['-n', ns, '-o', 'link', 'show'], { encoding: 'utf8' })
    .split('\n')
    .find((l) => l.startsWith(`${index}: `));
  return Number(/ mtu (\d+) /.exec(line ?? '')?.[1]);
}

/** The MTU a route inside a namespace carries (NaN without one). */
function routeMtu(ns: string, prefix: string): number {
  const out = execFileSync('ip', ['-n', ns, 'route', 'show', prefix], { encoding: 'utf8' });
  return Number(/ mtu (\d+)/.exec(out)?.[1]);
}

/** One don't-fragment ping of `size` bytes of IP packet from a pod namespace. */
function dfPing(ns: string, to: string, size: number): { ok: boolean; out: string } {
  // 20 bytes of IP header and 8 of ICMP header around the payload.
  const args = ['netns', 'exec', ns, 'ping', '-M', 'do', '-c', '1', '-W', '2', '-s', String(size - 28), to];
  try {
    return {
      ok: true,
      out: execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }),
    };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    return { ok: false, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

describeRoot('pod MTU follows the fabric (vxlan, no --mtu; real kernel)', function () {
  this.timeout(120_000);
  let c: FabricCluster;
  let nodes: ClusterNode[];
  /** The namespace of the first pod on the first node. */
  let firstPod = '';
  /** The address of the first pod on the second node. */
  let remotePod = '';
  /** The namespace of the pod attached on the first node after its restart. */
  let secondPod = '';
  const attach = (n: ClusterNode, id: string): Promise<{ ns: string; ip: string; mtu: number }> =>
    c.attachPod(n, id);

  before(async () => {
    c = await FabricCluster.start({
      source: 'static',
      fabric: 'vxlan',
      nodes: [
        { name: 'ma', subnet: 1, host: 1, range: 1 },
        { name: 'mc', subnet: 2, host: 3, range: 3 },
      ],
    });
    nodes = c.nodes;
  });

  after(async () => {
    await c?.teardown();
  });

  it('gives a pod the uplink MTU less VXLAN, which crosses the tunnel whole; one byte more fails in the pod', async () => {
    const [ma, mc] = nodes as [ClusterNode, ClusterNode];
    expect(linkMtu(ma.ns, 'eth0'), 'the uplink the test made').to.equal(1500);
    const a = await attach(ma, 'p1');
    const c = await attach(mc, 'p1');
    firstPod = a.ns;
    remotePod = c.ip;
    expect(linkMtu(a.ns, 'eth0')).to.equal(1450);
    expect(linkMtu(c.ns, 'eth0')).to.equal(1450);
    expect(a.mtu, 'the MTU Attach answers').to.equal(1450);
    await waitUntil(
      async () => dfPing(a.ns, c.ip, 1450).ok,
      'a pod-MTU packet with DF set crosses the VXLAN path',
    );
    const over = dfPing(a.ns, c.ip, 1451);
    expect(over.ok).to.equal(false);
    expect(over.out).to.match(/message too long|mtu = 1450/i);
  });

  it('applies an uplink MTU changed across a restart to new pods and, in place, to the pod before', async () => {
    const ma = nodes[0] as ClusterNode;
    const mc = nodes[1] as ClusterNode;
    const remote = remotePod;
    // A route on the pod's interface that carries an MTU of its own (as a chained plugin may add):
    // it follows the interface's.
    execFileSync('ip', [
      ...['-n', firstPod, 'route', 'add', `10.244.${mc.range}.0/24`],
      ...['via', '169.254.1.1', 'dev', 'eth0', 'mtu', '1450'],
    ]);
    const before = linkIndexes(firstPod);
    await c.stop(ma);
    execFileSync('ip', ['-n', ma.ns, 'link', 'set', 'dev', 'eth0', 'mtu', '1400']);
    await c.startDaemon(ma);
    const b = await attach(ma, 'p2');
    secondPod = b.ns;
    expect(linkMtu(b.ns, 'eth0')).to.equal(1350);
    // The pod attached before the change: both ends and its route, in place (the same interfaces).
    await waitUntil(
      async () => linkMtu(firstPod, 'eth0') === 1350,
      "the running pod's interface follows the new pod MTU",
    );
    expect(linkIndexes(firstPod), 'the same pair, not attached again').to.deep.equal(before);
    expect(hostLinkMtu(ma.ns, before.peer), 'its host end').to.equal(1350);
    expect(routeMtu(firstPod, `10.244.${mc.range}.0/24`), 'its route with an MTU').to.equal(1350);
    await waitUntil(
      async () => dfPing(firstPod, remote, 1350).ok,
      'a packet of the new pod MTU with DF set crosses the VXLAN path',
    );
    const over = dfPing(firstPod, remote, 1351);
    expect(over.ok).to.equal(false);
    expect(over.out, 'refused in the pod, not lost on the way').to.match(/message too long|mtu = 1350/i);
    const st = await (ma.daemon as DaemonProcess).client.status();
    expect(JSON.stringify(st)).not.to.include('larger MTU than the vxlan fabric carries');
    const net = st.networks.find((n) => n.name === 'default');
    expect(net?.mtuUpdated, 'Status counts the change').to.equal(1);
    expect(net?.mtuFailed).to.equal(0);
  });

  it('applies a configured --mtu changed across a restart to every running pod of the network, in place', async () => {
    const ma = nodes[0] as ClusterNode;
    const pods = [firstPod, secondPod];
    const before = pods.map(linkIndexes);
    await c.restart(ma, { mtu: '1300' });
    await waitUntil(
      async () => pods.every((ns) => linkMtu(ns, 'eth0') === 1300),
      'both running pods follow the configured MTU',
    );
    expect(pods.map(linkIndexes), 'the same pairs').to.deep.equal(before);
    for (const b of before) expect(hostLinkMtu(ma.ns, b.peer)).to.equal(1300);
    expect(dfPing(firstPod, remotePod, 1300).ok).to.equal(true);
    expect(dfPing(firstPod, remotePod, 1301).out).to.match(/message too long|mtu = 1300/i);
  });
});
