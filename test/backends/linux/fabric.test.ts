import { expect } from 'chai';
import { spawn } from 'node:child_process';
import type { FabricReport, FabricSettings } from '../../../core/fabric-dataplane';
import { ip, ipJson } from '../../support/netns-fixture';
import {
  CLUSTER,
  FabricTopology,
  bridge,
  kernelState,
  pingOutput,
  settings,
  vxlanTxPackets,
} from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { NodeFabrics } from '../../support/node-fabrics';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { waitUntil } from '../../support/wait-until';

// The Linux fabric against the real kernel: three node namespaces on an underlay of two subnets joined
// by a router (na and nb share subnet 1, nc sits behind the router on subnet 2), one pod per node
// attached by the Linux backend, each node's fabric given the other nodes as peers directly.

describeRoot('Linux fabric (routed, VXLAN, hybrid; real kernel)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  const fabrics = new NodeFabrics();
  const reports = new Map<string, FabricReport>();
  /** What each node's dataplane found at its last prepare(): what it would publish. */

  before(async () => {
    await topo.build([nodeSpec('na', 1, 1), nodeSpec('nb', 1, 2), nodeSpec('nc', 2, 3)]);
  });

  after(async () => {
    await fabrics.stopAll();
    await topo.cleanup();
  });

  /** Every node gets a fresh fabric object in `mode`, prepared, then given the others as peers. */
  async function bringUp(mode: FabricSettings['mode'], opts: { monitor?: boolean } = {}): Promise<void> {
    await fabrics.stopAll();
    fabrics.locals.clear();
    for (const n of topo.nodes) {
      const f = fabrics.open(n, { monitor: opts.monitor ?? false });
      fabrics.locals.set(n.name, await f.prepare(settings(mode)));
    }
    for (const n of topo.nodes)
      reports.set(n.name, await fabrics.of(n).apply(topo.peersOf(n.name, fabrics.locals)));
    // Applying the same table again finds the kernel as it should be: nothing is put back.
    for (const n of topo.nodes)
      expect(
        (await fabrics.of(n).apply(topo.peersOf(n.name, fabrics.locals))).repairs,
        `${mode} on ${n.name}`,
      ).to.equal(0);
  }

  async function everyPodReaches(pairs: Array<[string, string]>): Promise<void> {
    for (const [from, to] of pairs) {
      const a = topo.node(from);
      const b = topo.node(to);
      expect(
        await pings(a.pod, b.podIp, { count: 3, waitSeconds: 2, intervalSeconds: 0.2 }),
        `${from} pod → ${to} pod`,
      ).to.equal(true);
    }
  }

  describe('routed', () => {
    before(() => bringUp('routed'));

    it('programs one direct route per directly connected peer and the catch-all, nothing of VXLAN', async () => {
      expect(await kernelState(topo.node('na').ns)).to.deep.equal({
        routes: [
          '10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1500',
          'unreachable 10.244.0.0/16 metric 4294967295',
        ],
        neigh: [],
        fdb: [],
      });
      expect(await ipJson(topo.node('na').ns, 'link', 'show', 'wn-vxlan').catch(() => [])).to.deep.equal([]);
      expect(reports.get('na')?.objects).to.deep.equal({ routes: 2, neighbours: 0, fdb: 0 });
      expect(reports.get('na')?.ready).to.equal(true);
    });

    it('carries pods across nodes on one subnet', () =>
      everyPodReaches([
        ['na', 'nb'],
        ['nb', 'na'],
      ]));

    it('reports the peer behind the router unreachable with a reason, and its pods hit the catch-all', async () => {
      const path = reports.get('na')?.peers.find((p) => p.node === 'nc');
      expect(path?.path).to.equal('unreachable');
      expect(path?.reason).to.match(/10\.100\.2\.3 is not on a subnet of uplink eth0 \(10\.100\.1\.0\/24\)/);
      expect(reports.get('na')?.peers.find((p) => p.node === 'nb')?.path).to.equal('direct');
      // Never via the default route (the router would carry it): refused at once by the catch-all.
      const r = await pingOutput(topo.node('na').pod, topo.node('nc').podIp, 10);
      expect(r.ok).to.equal(false);
      expect(r.out, r.out).to.match(/Destination (Host|Net) Unreachable/);
    });
  });

  describe('vxlan', () => {
    before(() => bringUp('vxlan'));

    it('programs per peer one neighbour, one FDB entry and one route per prefix through wn-vxlan', async () => {
      const state = await kernelState(topo.node('na').ns);
      expect(state).to.deep.equal({
        routes: [
          '10.244.2.0/24 via 10.244.2.0 dev wn-vxlan metric 1024 onlink mtu 1450',
          '10.244.3.0/24 via 10.244.3.0 dev wn-vxlan metric 1024 onlink mtu 1450',
          'unreachable 10.244.0.0/16 metric 4294967295',
        ],
        neigh: [
          '10.244.2.0 lladdr 0e:77:0a:64:01:02 PERMANENT',
          '10.244.3.0 lladdr 0e:77:0a:64:02:03 PERMANENT',
        ],
        fdb: [
          '0e:77:0a:64:01:02 dst 10.100.1.2 self permanent',
          '0e:77:0a:64:02:03 dst 10.100.2.3 self permanent',
        ],
      });
      const [dev] = await ipJson<{
        mtu: number;
        address: string;
        linkinfo: {
          info_kind: string;
          info_data: { id: number; port: number; learning: boolean; local: string };
        };
      }>(topo.node('na').ns, '-d', 'link', 'show', 'wn-vxlan');
      expect(dev?.mtu).to.equal(1450);
      expect(dev?.address).to.equal('0e:77:0a:64:01:01');
      expect(dev?.linkinfo.info_data).to.include({
        id: 30574,
        port: 4789,
        learning: false,
        local: '10.100.1.1',
      });
      expect(reports.get('na')?.objects).to.deep.equal({ routes: 3, neighbours: 2, fdb: 2 });
    });

    it('carries pods across every pair of nodes, the router included', () =>
      everyPodReaches([
        ['na', 'nb'],
        ['na', 'nc'],
        ['nb', 'nc'],
        ['nc', 'na'],
      ]));
  });

  describe('hybrid', () => {
    before(() => bringUp('hybrid'));

    it('routes the same-subnet peer directly and tunnels only to the peer behind the router', async () => {
      expect(await kernelState(topo.node('na').ns)).to.deep.equal({
        routes: [
          '10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450',
          '10.244.3.0/24 via 10.244.3.0 dev wn-vxlan metric 1024 onlink mtu 1450',
          'unreachable 10.244.0.0/16 metric 4294967295',
        ],
        neigh: ['10.244.3.0 lladdr 0e:77:0a:64:02:03 PERMANENT'],
        fdb: ['0e:77:0a:64:02:03 dst 10.100.2.3 self permanent'],
      });
      expect(reports.get('na')?.peers.map((p) => `${p.node}:${p.path}`)).to.deep.equal([
        'nb:direct',
        'nc:vxlan',
      ]);
    });

    it('carries pods across every pair, encapsulating only across the router', async () => {
      const na = topo.node('na').ns;
      const before = await vxlanTxPackets(na);
      await everyPodReaches([
        ['na', 'nb'],
        ['nb', 'na'],
      ]);
      expect(await vxlanTxPackets(na), 'same subnet: nothing through wn-vxlan').to.equal(before);
      await everyPodReaches([
        ['na', 'nc'],
        ['nc', 'nb'],
      ]);
      expect(await vxlanTxPackets(na), 'across the router: through wn-vxlan').to.be.greaterThan(before);
    });

    it('a restart (a new object on the same namespace) keeps the device and loses no packet of a 10 ms ping', async () => {
      const na = topo.node('na');
      const [dev] = await ipJson<{ ifindex: number }>(na.ns, 'link', 'show', 'wn-vxlan');
      const stateBefore = await kernelState(na.ns);
      // 300 echo requests 10 ms apart to the pod behind the router; the restart begins once replies flow.
      const ping10ms = `ping -i 0.01 -c 300 -W 2 ${topo.node('nc').podIp}`;
      const child = spawn('ip', ['netns', 'exec', na.pod, ...ping10ms.split(' ')]);
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      const ping = new Promise<string>((resolve) => child.once('close', () => resolve(out)));
      await waitUntil(() => /bytes from/.test(out), 'the first echo reply');
      await fabrics.of(na).stop();
      const restarted = fabrics.open(na);
      fabrics.locals.set('na', await restarted.prepare(settings('hybrid')));
      const report = await restarted.apply(topo.peersOf('na', fabrics.locals));
      expect(out, 'the restart happened while the ping ran').to.not.match(/packets transmitted/);
      expect(await ping).to.match(/\n300 packets transmitted, 300 received, 0% packet loss/);
      const [after] = await ipJson<{ ifindex: number }>(na.ns, 'link', 'show', 'wn-vxlan');
      expect(after?.ifindex, 'same device').to.equal(dev?.ifindex);
      expect(await kernelState(na.ns)).to.deep.equal(stateBefore);
      expect(report.repairs).to.equal(0);
      expect(report.ready).to.equal(true);
    });
  });

  describe('strays, foreign routes and drift (hybrid)', () => {
    before(() => bringUp('hybrid', { monitor: true }));

    it("removes strays of ours and leaves a foreign route and the pods' routes alone", async () => {
      const na = topo.node('na');
      const podRoutes = await ip('-n', na.ns, 'route', 'show', na.podIp);
      // Left by an earlier run for a peer that is gone: ours (protocol 119, our device).
      await ip(
        '-n',
        na.ns,
        'route',
        'add',
        '10.244.9.0/24',
        'via',
        '10.100.1.2',
        'proto',
        '119',
        'metric',
        '1024',
      );
      await ip(
        '-n',
        na.ns,
        'neigh',
        'add',
        '10.244.9.0',
        'lladdr',
        '0e:77:0a:64:01:09',
        'dev',
        'wn-vxlan',
        'nud',
        'permanent',
      );
      await bridge(
        na.ns,
        'fdb',
        'append',
        '0e:77:0a:64:01:09',
        'dev',
        'wn-vxlan',
        'dst',
        '10.100.1.9',
        'self',
        'permanent',
      );
      // Someone else's, in the same table and inside the cluster range.
      await ip('-n', na.ns, 'route', 'add', '10.244.8.0/24', 'via', '10.100.1.2', 'proto', 'static');
      await ip(
        '-n',
        na.ns,
        'route',
        'add',
        '10.244.2.0/24',
        'via',
        '10.100.1.2',
        'proto',
        'static',
        'metric',
        '5',
      );
      const report = await fabrics.of(na).apply(topo.peersOf('na', fabrics.locals));
      expect(report.ready).to.equal(true);
      const state = await kernelState(na.ns);
      expect(state.routes).to.deep.equal([
        '10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450',
        '10.244.3.0/24 via 10.244.3.0 dev wn-vxlan metric 1024 onlink mtu 1450',
        'unreachable 10.244.0.0/16 metric 4294967295',
      ]);
      expect(state.neigh).to.deep.equal(['10.244.3.0 lladdr 0e:77:0a:64:02:03 PERMANENT']);
      expect(state.fdb).to.deep.equal(['0e:77:0a:64:02:03 dst 10.100.2.3 self permanent']);
      const foreign = (await ip('-n', na.ns, 'route', 'show', 'proto', 'static'))
        .split('\n')
        .filter((l) => l.includes('via'));
      expect(foreign).to.deep.equal([
        '10.244.2.0/24 via 10.100.1.2 dev eth0 metric 5 ',
        '10.244.8.0/24 via 10.100.1.2 dev eth0 ',
      ]);
      expect(await ip('-n', na.ns, 'route', 'show', na.podIp)).to.equal(podRoutes);
      await everyPodReaches([['nb', 'na']]);
      await ip('-n', na.ns, 'route', 'del', '10.244.8.0/24', 'proto', 'static');
      await ip('-n', na.ns, 'route', 'del', '10.244.2.0/24', 'proto', 'static', 'metric', '5');
    });

    for (const [what, remove, present] of [
      [
        'a route',
        (ns: string) => ip('-n', ns, 'route', 'del', '10.244.3.0/24', 'proto', '119'),
        async (ns: string) =>
          /10\.244\.3\.0\/24 via 10\.244\.3\.0 dev wn-vxlan/.test(
            await ip('-n', ns, 'route', 'show', 'proto', '119'),
          ),
      ],
      [
        'the catch-all',
        (ns: string) => ip('-n', ns, 'route', 'del', 'unreachable', CLUSTER, 'proto', '119'),
        async (ns: string) =>
          /unreachable 10\.244\.0\.0\/16/.test(await ip('-n', ns, 'route', 'show', 'proto', '119')),
      ],
      [
        'a neighbour',
        (ns: string) => ip('-n', ns, 'neigh', 'del', '10.244.3.0', 'dev', 'wn-vxlan'),
        async (ns: string) =>
          /10\.244\.3\.0 lladdr/.test(
            await ip('-n', ns, 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent'),
          ),
      ],
      [
        'an FDB entry',
        (ns: string) =>
          bridge(ns, 'fdb', 'del', '0e:77:0a:64:02:03', 'dev', 'wn-vxlan', 'dst', '10.100.2.3', 'self'),
        async (ns: string) =>
          /0e:77:0a:64:02:03 dst 10\.100\.2\.3/.test(await bridge(ns, 'fdb', 'show', 'dev', 'wn-vxlan')),
      ],
    ] as const) {
      it(`puts back ${what} removed by hand, told by the kernel, and counts the repair`, async () => {
        const na = topo.node('na');
        const repairs = fabrics.of(na).report().repairs;
        expect(await present(na.ns)).to.equal(true);
        await remove(na.ns);
        expect(await present(na.ns)).to.equal(false);
        // The monitor reacts within a second; the periodic pass (60 s) cannot be what repairs it here.
        await waitUntil(() => present(na.ns), `${what} back`, 10_000);
        await waitUntil(() => fabrics.of(na).report().repairs === repairs + 1, 'the repair counted', 5_000);
        await everyPodReaches([['na', 'nc']]);
      });
    }

    it('brings back the VXLAN device deleted by hand, with its entries and routes', async () => {
      const na = topo.node('na');
      const before = await kernelState(na.ns);
      const repairs = fabrics.of(na).report().repairs;
      await ip('-n', na.ns, 'link', 'del', 'wn-vxlan');
      await waitUntil(
        async () => JSON.stringify(await kernelState(na.ns)) === JSON.stringify(before),
        'the device, its neighbour, FDB entry and route back',
        10_000,
        { retryOnError: true },
      );
      await waitUntil(() => fabrics.of(na).report().repairs > repairs, 'the repair counted', 5_000);
      await everyPodReaches([['na', 'nc']]);
    });

    it('a foreign route holding our prefix and metric is left alone, and the report says why', async () => {
      const na = topo.node('na');
      await ip(
        '-n',
        na.ns,
        'route',
        'add',
        '10.244.7.0/24',
        'via',
        '10.100.1.2',
        'proto',
        'static',
        'metric',
        '1024',
      );
      try {
        const peers = [
          ...topo.peersOf('na', fabrics.locals),
          { node: 'ne', underlay: ['10.100.1.7'], mtu: 1500, bootId: '', prefixes: ['10.244.7.0/24'] },
        ];
        const report = await fabrics.of(na).apply(peers);
        expect(report.ready).to.equal(false);
        expect(report.reasons.join('\n')).to.match(
          /add route 10\.244\.7\.0\/24 via 10\.100\.1\.7 metric 1024 \(ne\): .*EEXIST/,
        );
        expect(await ip('-n', na.ns, 'route', 'show', '10.244.7.0/24')).to.equal(
          '10.244.7.0/24 via 10.100.1.2 dev eth0 proto static metric 1024 \n',
        );
      } finally {
        await ip('-n', na.ns, 'route', 'del', '10.244.7.0/24', 'proto', 'static');
        await fabrics.of(na).apply(topo.peersOf('na', fabrics.locals));
      }
    });

    it('without the monitor, the periodic pass repairs', async () => {
      const na = topo.node('na');
      await fabrics.of(na).stop();
      const periodic = fabrics.open(na, { convergeIntervalMs: 300 });
      await periodic.prepare(settings('hybrid'));
      await periodic.apply(topo.peersOf('na', fabrics.locals));
      await ip('-n', na.ns, 'route', 'del', '10.244.3.0/24', 'proto', '119');
      await waitUntil(
        async () => /10\.244\.3\.0\/24/.test(await ip('-n', na.ns, 'route', 'show', 'proto', '119')),
        'the route back',
      );
      await waitUntil(() => periodic.report().repairs === 1, 'the repair counted', 5_000);
    });

    it('a peer that leaves is removed from the kernel, the others untouched', async () => {
      const na = topo.node('na');
      const report = await fabrics
        .of(na)
        .apply(topo.peersOf('na', fabrics.locals).filter((p) => p.node !== 'nc'));
      expect(report.objects).to.deep.equal({ routes: 2, neighbours: 0, fdb: 0 });
      expect((await kernelState(na.ns)).routes).to.deep.equal([
        '10.244.2.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450',
        'unreachable 10.244.0.0/16 metric 4294967295',
      ]);
      await everyPodReaches([['na', 'nb']]);
      const r = await pingOutput(na.pod, topo.node('nc').podIp, 10);
      expect(r.out, r.out).to.match(/Destination (Host|Net) Unreachable/);
      await fabrics.of(na).apply(topo.peersOf('na', fabrics.locals));
      await everyPodReaches([['na', 'nc']]);
    });
  });

  describe('external', () => {
    before(() => bringUp('external'));

    it('programs nothing (and removes what the other modes left), but reports every peer', async () => {
      expect(await kernelState(topo.node('na').ns)).to.deep.equal({ routes: [], neigh: [], fdb: [] });
      expect(
        reports.get('na')?.peers.map((p) => `${p.node}:${p.path}:${p.prefixes.join(',')}`),
      ).to.deep.equal(['nb:external:10.244.2.0/24', 'nc:external:10.244.3.0/24']);
    });
  });
});
