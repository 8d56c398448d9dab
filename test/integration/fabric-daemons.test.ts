import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import {
  FabricTopology,
  fabricRoutes,
  peersFileEntry,
  peersOf,
  writePeersFile,
  type BareNode,
} from '../backends/linux/fabric-topology';
import { attachRequest } from '../support/attach-request';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';

// Three real daemons, each in its node namespace on a test-owned underlay (na and nb on one subnet, nc
// behind a router), in hybrid mode with the static peer source: each is given a peers file naming the
// other two. Pods are attached through each daemon's own API; the fabric the daemons program is what
// carries their traffic, directly to the neighbour on the same subnet and over VXLAN across the router.

interface Node extends BareNode {
  range: number;
  dir: string;
  peersFile: string;
  daemon?: DaemonProcess;
  pod?: string;
  podIp?: string;
}

function writePeers(n: Node, others: Node[]): void {
  writePeersFile(
    n.peersFile,
    others.map((o) => peersFileEntry(o.name, o.address, [`10.244.${o.range}.0/24`])),
  );
}

describeRoot('fabric between three daemons (hybrid, static peers; real kernel)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  const nodes: Node[] = [];

  before(async () => {
    await topo.build([]);
    for (const [name, subnet, host, range] of [
      ['na', 1, 1, 1],
      ['nb', 1, 2, 2],
      ['nc', 2, 3, 3],
    ] as const) {
      const bare = await topo.addBareNode({ name, subnet, host });
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `wn-fab-${name}-`));
      nodes.push({ ...bare, range, dir, peersFile: path.join(dir, 'peers.json') });
    }
    for (const n of nodes) {
      writePeers(
        n,
        nodes.filter((o) => o !== n),
      );
      n.daemon = await DaemonProcess.start({
        dir: n.dir,
        netns: n.ns,
        flags: {
          'pod-cidr': `10.244.${n.range}.0/24`,
          mtu: '1450',
          fabric: 'hybrid',
          'peers-file': n.peersFile,
        },
      });
    }
    for (const n of nodes) {
      const pod = topo.pool.add(`${n.name}pod`);
      const res: AttachResponse = await n.daemon!.client.call(
        n.daemon!.client.raw.attach,
        attachRequest(`${n.name}-pod`, pod.path),
      );
      n.pod = pod.name;
      n.podIp = (res.ips[0]?.cidr ?? '').split('/')[0];
    }
  });

  after(async () => {
    for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
    topo.cleanup();
    for (const n of nodes) fs.rmSync(n.dir, { recursive: true, force: true });
  });

  const node = (name: string): Node => nodes.find((n) => n.name === name) as Node;

  it('programs the neighbour on the same subnet directly and the node behind the router over VXLAN', async () => {
    const na = node('na');
    await waitUntil(async () => fabricRoutes(na.ns).length === 2, 'na has its two peer routes', 20_000);
    expect(fabricRoutes(na.ns)).to.deep.equal([
      '10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450',
      '10.244.3.0/24 via 10.244.3.0 dev wn-vxlan metric 1024 onlink mtu 1450',
    ]);
    const paths = Object.fromEntries(peersOf(path.join(na.dir, 'api.sock')).map((p) => [p.node, p.path]));
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
        execFileSync(process.execPath, [CLI, 'peers', '--json', '--socket', path.join(na.dir, 'api.sock')], {
          encoding: 'utf8',
        }),
      ) as { filteredPackets?: number; warnings: string[] };
    await waitUntil(() => status().filteredPackets !== undefined, "Status has the filter's counter");
    expect(status().filteredPackets).to.be.a('number');
    expect(status().warnings.join('\n')).to.not.include('VXLAN source filter off');
  });

  it('carries every pod to every other pod', async () => {
    for (const n of nodes)
      await waitUntil(async () => fabricRoutes(n.ns).length === 2, `${n.name} programmed`, 20_000);
    for (const from of nodes)
      for (const to of nodes) {
        if (from === to) continue;
        expect(
          await pings(from.pod as string, to.podIp as string, { count: 3, waitSeconds: 2 }),
          `${from.name} → ${to.name}`,
        ).to.equal(true);
      }
  });

  it('carries the pod MTU across VXLAN without fragments; one byte more fails in the pod, at once', async () => {
    const na = node('na');
    const nc = node('nc');
    const dfPing = (size: number): { ok: boolean; out: string } => {
      try {
        const out = execFileSync(
          'ip',
          [
            'netns',
            'exec',
            na.pod as string,
            'ping',
            '-M',
            'do',
            '-c',
            '1',
            '-W',
            '2',
            '-s',
            String(size),
            nc.podIp as string,
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
    writePeers(na, [node('nc')]);
    // The default grace (180 s) keeps nb's route: its leaving the file is not evidence that it is dead.
    await waitUntil(
      async () => peersOf(path.join(na.dir, 'api.sock')).some((p) => p.node === 'nb' && !!p.withdrawnAt),
      'na sees nb withdrawn from its source',
      20_000,
    );
    expect(fabricRoutes(na.ns)).to.have.length(2);
    expect(await pings(na.pod as string, node('nb').podIp as string)).to.equal(true);
    // Back within the grace: the withdrawal is cancelled.
    writePeers(na, [node('nb'), node('nc')]);
    await waitUntil(
      async () => peersOf(path.join(na.dir, 'api.sock')).every((p) => !p.withdrawnAt),
      "nb back in na's table",
      20_000,
    );
    expect(fabricRoutes(na.ns)).to.have.length(2);
  });

  it('withdraws at once a peer that left the file and fails its probes (daemon killed, uplink down)', async () => {
    const na = node('na');
    const nc = node('nc');
    const api = path.join(na.dir, 'api.sock');
    const probeOf = (name: string): { state?: string; answered?: boolean } | undefined =>
      (peersOf(api) as Array<{ node: string; probe?: { state?: string; answered?: boolean } }>).find(
        (p) => p.node === name,
      )?.probe;
    // The daemons probe every 5 s (the default): nc answers on its gateway key, over VXLAN.
    await waitUntil(() => probeOf('nc')?.state === 'reachable', 'na reaches nc by probe', 30_000);
    expect(probeOf('nb')?.state).to.equal('reachable');
    await nc.daemon?.kill('SIGKILL');
    nc.daemon = undefined;
    execFileSync('ip', ['-n', nc.ns, 'link', 'set', 'eth0', 'down']);
    writePeers(na, [node('nb')]);
    // Far sooner than the 180 s grace: the file and the data path both say nc is gone.
    await waitUntil(
      () => !fabricRoutes(na.ns).some((r) => r.startsWith('10.244.3.0/24')),
      "nc's route withdrawn from na",
      60_000,
    );
    expect(peersOf(api).map((p) => p.node)).to.deep.equal(['nb']);
    expect(fabricRoutes(na.ns)).to.deep.equal(['10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450']);
  });
});
