import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { CLI } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { FabricCluster, STATIC_HYBRID, usualNodes, type ClusterNode } from '../support/fabric-cluster';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';

// Three real daemons, each in its node namespace on a test-owned underlay (na and nb on one subnet, nc
// behind a router), in hybrid mode with the static peer source: each is given a peers file naming the
// other two. Pods are attached through each daemon's own API; the fabric the daemons program is what
// carries their traffic, directly to the neighbour on the same subnet and over VXLAN across the router.

describeRoot('fabric between three daemons (hybrid, static peers; real kernel)', function () {
  this.timeout(120_000);
  let c: FabricCluster;

  before(async () => {
    c = await FabricCluster.start({
      ...STATIC_HYBRID,
      nodes: usualNodes({ na: { range: 1 }, nb: { range: 2 }, nc: { range: 3 } }),
      podsPerNode: 1,
    });
  });

  after(async () => {
    await c?.teardown();
  });

  const node = (name: string): ClusterNode => c.node(name);

  it('programs the neighbour on the same subnet directly and the node behind the router over VXLAN', async () => {
    const na = node('na');
    await c.waitForRoutes(na, 2, 20_000);
    expect(c.routes(na)).to.deep.equal([
      '10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450',
      '10.244.3.0/24 via 10.244.3.0 dev wn-vxlan metric 1024 onlink mtu 1450',
    ]);
    const paths = Object.fromEntries(c.peersOf(na).map((p) => [p.node, p.path]));
    expect(paths).to.deep.equal({ nb: 'direct', nc: 'vxlan' });
  });

  it('admits only the peers to the VXLAN port, and Status shows the drop counter', async () => {
    const na = node('na');
    const elements = (): string =>
      execFileSync(
        'ip',
        ['netns', 'exec', na.ns, 'nft', 'list', 'set', 'inet', 'workloadnet', 'vxlan_peers4'],
        {
          encoding: 'utf8',
        },
      );
    await waitUntil(() => /10\.100\.2\.3/.test(elements()), 'na admits its peers', 20_000, {
      retryOnError: true,
    });
    expect(elements()).to.match(/elements = \{ 10\.100\.1\.2, 10\.100\.2\.3 \}/);
    const status = (): { filteredPackets?: number; warnings: string[] } =>
      JSON.parse(
        execFileSync(process.execPath, [CLI, 'peers', '--json', '--socket', na.api], {
          encoding: 'utf8',
        }),
      ) as { filteredPackets?: number; warnings: string[] };
    await waitUntil(() => status().filteredPackets !== undefined, "Status has the filter's counter");
    expect(status().filteredPackets).to.be.a('number');
    expect(status().warnings.join('\n')).to.not.include('VXLAN source filter off');
  });

  it('carries every pod to every other pod', async () => {
    for (const n of c.nodes) await c.waitForRoutes(n, 2, 20_000);
    expect(await c.silentPairs(), 'pod pairs that did not answer').to.deep.equal([]);
  });

  it('carries the pod MTU across VXLAN without fragments; one byte more fails in the pod, at once', async () => {
    const dfPing = (size: number): { ok: boolean; out: string } => {
      try {
        const out = execFileSync(
          'ip',
          [
            'netns',
            'exec',
            c.pod('na').ns,
            'ping',
            '-M',
            'do',
            '-c',
            '1',
            '-W',
            '2',
            '-s',
            String(size),
            c.pod('nc').ip,
          ],
          { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
        );
        return { ok: true, out };
      } catch (err) {
        const e = err as { stdout?: string; stderr?: string };
        return { ok: false, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
      }
    };
    // 1450 bytes of IP packet: 20 of IP header and 8 of ICMP header around the payload.
    expect(dfPing(1450 - 28).ok, 'a pod-MTU packet with DF set crosses the VXLAN path').to.equal(true);
    const over = dfPing(1450 - 28 + 1);
    expect(over.ok).to.equal(false);
    expect(over.out).to.match(/message too long|mtu = 1450/i);
  });

  it('withdraws a peer that leaves the file only after the grace, and never one that stays', async () => {
    const na = node('na');
    c.writePeers(na, [node('nc')]);
    // The default grace (180 s) keeps nb's route: its leaving the file is not evidence that it is dead.
    await waitUntil(
      async () => c.peersOf(na).some((p) => p.node === 'nb' && !!p.withdrawnAt),
      'na sees nb withdrawn from its source',
      20_000,
    );
    expect(c.routes(na)).to.have.length(2);
    expect(await pings(c.pod('na').ns, c.pod('nb').ip)).to.equal(true);
    // Back within the grace: the withdrawal is cancelled.
    c.writePeers(na, [node('nb'), node('nc')]);
    await waitUntil(async () => c.peersOf(na).every((p) => !p.withdrawnAt), "nb back in na's table", 20_000);
    expect(c.routes(na)).to.have.length(2);
  });

  it('withdraws at once a peer that left the file and fails its probes (daemon killed, uplink down)', async () => {
    const na = node('na');
    const nc = node('nc');
    const probeOf = (name: string): { state?: string; answered?: boolean } | undefined =>
      (c.peersOf(na) as Array<{ node: string; probe?: { state?: string; answered?: boolean } }>).find(
        (p) => p.node === name,
      )?.probe;
    // The daemons probe every 5 s (the default): nc answers on its gateway key, over VXLAN.
    await waitUntil(() => probeOf('nc')?.state === 'reachable', 'na reaches nc by probe', 30_000);
    expect(probeOf('nb')?.state).to.equal('reachable');
    await c.stop(nc, 'SIGKILL');
    execFileSync('ip', ['-n', nc.ns, 'link', 'set', 'eth0', 'down']);
    c.writePeers(na, [node('nb')]);
    // Far sooner than the 180 s grace: the file and the data path both say nc is gone.
    await waitUntil(
      () => !c.routes(na).some((r) => r.startsWith('10.244.3.0/24')),
      "nc's route withdrawn from na",
      60_000,
    );
    expect(c.peersOf(na).map((p) => p.node)).to.deep.equal(['nb']);
    expect(c.routes(na)).to.deep.equal(['10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450']);
  });
});
