import { expect } from 'chai';
import { FabricController } from '../../../core/fabric/fabric-controller';
import type { LocalNode } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { silentLogger } from '../../../core/logger';
import { Metrics } from '../../../core/metrics';
import { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { ManualPeerSource, until } from '../../support/recording-fabric-dataplane';
import { describeRoot } from '../../support/describe-root';
import { netnsPath } from '../../support/netns';
import { pings } from '../../support/ping';
import { FabricTopology, kernelState, settings } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';

// A record that states a live node's VTEP MAC, on the real kernel: na's fabric controller and Linux
// dataplane are given nb and nc, then a record "aaa" (named before them, an underlay address nothing
// answers on) with nc's MAC. nc keeps its route and FDB entry and its pods stay reachable; aaa is
// refused in words and in the metric, and dropped with its record at once, with no grace.

describeRoot('fabric identities on the kernel: a record squatting a VTEP MAC', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  const fabrics: LinuxFabric[] = [];
  const locals = new Map<string, LocalNode>();
  const source = new ManualPeerSource();
  const metrics = new Metrics();
  let controller: FabricController | undefined;

  before(async () => {
    await topo.build([nodeSpec('na', 1, 1), nodeSpec('nb', 1, 2), nodeSpec('nc', 2, 3)]);
    const fabricOf = (name: string): LinuxFabric => {
      const f = new LinuxFabric({ hostNetnsPath: netnsPath(topo.node(name).ns), monitor: false });
      fabrics.push(f);
      return f;
    };
    for (const name of ['nb', 'nc']) locals.set(name, await fabricOf(name).prepare(settings('vxlan')));
    controller = new FabricController({
      settings: settings('vxlan'),
      nodeName: 'na',
      bootId: 'boot-na',
      source,
      dataplanes: [fabricOf('na')],
      backends: ['linux'],
      withdrawGraceMs: 180_000,
      log: silentLogger(),
      metrics,
    });
    await controller.start();
    await until(() => source.started !== undefined, 10_000, 'na published');
    const st = controller.status();
    locals.set('na', { underlay: st.underlay, uplink: st.uplink, mtu: st.mtu, subnets: [], vtep: st.vtep });
    for (const [i, name] of ['nb', 'nc'].entries()) await fabrics[i]?.apply(topo.peersOf(name, locals));
    source.set(topo.peersOf('na', locals));
    await controller.applyNow();
  });

  after(async () => {
    await controller?.stop();
    for (const f of fabrics.slice(0, 2)) await f.stop();
    await topo.cleanup();
  });

  const ncMac = (): string => locals.get('nc')?.vtep?.mac ?? '';
  const squatter = (): Peer => ({
    node: 'aaa',
    underlay: ['10.100.2.99'],
    mtu: 1500,
    vtep: { mac: ncMac(), vni: 30574, port: 4789 },
    bootId: '',
    prefixes: ['10.244.9.0/24'],
  });

  async function ncIsProgrammedAndReachable(): Promise<void> {
    const k = await kernelState(topo.node('na').ns);
    expect(k.fdb).to.include(`${ncMac()} dst 10.100.2.3 self permanent`);
    expect(k.neigh).to.include(`10.244.3.0 lladdr ${ncMac()} PERMANENT`);
    expect(
      k.routes.some((r) => r.startsWith('10.244.3.0/24 via 10.244.3.0 dev wn-vxlan')),
      k.routes.join('\n'),
    ).to.equal(true);
    expect(k.routes.some((r) => r.startsWith('10.244.9.0/24'))).to.equal(false);
    expect(
      await pings(topo.node('na').pod, topo.node('nc').podIp, {
        count: 3,
        waitSeconds: 2,
        intervalSeconds: 0.2,
      }),
      'na pod → nc pod',
    ).to.equal(true);
  }

  it("derives this node's VTEP MAC from its name and address, and carries pods both ways with it", async () => {
    expect(locals.get('na')?.vtep?.mac).to.match(/^0e:/).and.not.equal('0e:77:0a:64:01:01');
    await ncIsProgrammedAndReachable();
  });

  it("keeps nc's route and FDB entry, and its pods reachable, when a record named before it states its MAC", async () => {
    source.set([squatter(), ...topo.peersOf('na', locals)]);
    await controller?.applyNow();
    await ncIsProgrammedAndReachable();
    const row = controller?.status().peers.find((p) => p.node === 'aaa');
    expect(row?.path).to.equal('unreachable');
    expect(row?.reason).to.match(new RegExp(`VTEP MAC ${ncMac()} is held by nc`));
    controller?.observe();
    expect(await metrics.registry.metrics()).to.match(
      /^workloadnet_fabric_refused_claims\{claim="mac"\} 1$/m,
    );
  });

  it('drops the squatter with its record at once, without the withdrawal grace', async () => {
    source.set(topo.peersOf('na', locals));
    await controller?.applyNow();
    expect(controller?.status().peers.map((p) => p.node)).to.deep.equal(['nb', 'nc']);
    await ncIsProgrammedAndReachable();
  });

  it("keeps nc's entries when na's daemon restarts with the squatter listed: the kernel says who held them", async () => {
    await controller?.stop();
    controller = undefined;
    // A new daemon's dataplane knows no holders; the squatter sorts before nc.
    const restarted = new LinuxFabric({ hostNetnsPath: netnsPath(topo.node('na').ns), monitor: false });
    try {
      await restarted.prepare({ ...settings('vxlan'), nodeName: 'na' });
      const report = await restarted.apply([squatter(), ...topo.peersOf('na', locals)]);
      await ncIsProgrammedAndReachable();
      const row = report.peers.find((p) => p.node === 'aaa');
      expect(row?.reason).to.match(new RegExp(`VTEP MAC ${ncMac()} is held by nc`));
    } finally {
      await restarted.stop();
    }
  });
});
