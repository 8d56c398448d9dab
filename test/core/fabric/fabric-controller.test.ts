import { expect } from 'chai';
import { type FabricNetwork } from '../../../core/fabric/fabric-controller';
import { FabricPodMtu } from '../../../core/fabric/pod-mtu';
import { DpuDataplane, dpu } from './dpu-recording-dataplane';
import { RecordingFabricDataplane, peer, until } from '../../support/recording-fabric-dataplane';
import { GRACE_MS, controllerRig } from '../../support/controller-rig';
import { DPU_ENDPOINT as endpoint, VXLAN_SETTINGS } from '../../support/fabric-fixtures';

// The fabric controller against a peer source moved by hand and a dataplane that records its tables.
// Time of the withdrawal grace is a clock the test moves; nothing waits on it.

describe('fabric controller', () => {
  const rig = controllerRig(() => new RecordingFabricDataplane());

  it('derives the VTEP MAC from the address alone with the static source, whose peers files list it by hand', async () => {
    Object.defineProperty(rig.source, 'kind', { value: 'static' });
    await rig.make().start();
    expect(rig.dp.prepared).to.deep.equal([VXLAN_SETTINGS]);
  });

  it('prepares the dataplane and publishes this node with its underlay, MTU, VTEP and boot id', async () => {
    await rig.make().start();
    expect(rig.dp.prepared).to.deep.equal([{ ...VXLAN_SETTINGS, nodeName: 'n1' }]);
    await until(() => rig.source.started !== undefined);
    expect(rig.source.started).to.deep.equal({
      node: 'n1',
      underlay: ['192.0.2.1'],
      mtu: 1500,
      vtep: { mac: '0e:77:c0:00:02:01', vni: 30574, port: 4789 },
      bootId: 'boot-n1',
    });
  });

  it("shows each peer's DPU endpoints and how this node's DPUs see it now, and leaves the rows out when asked", async () => {
    const c = rig.make();
    await c.start();
    rig.source.set([{ ...peer('n2', 2), endpoints: [endpoint] }, peer('n3', 3)], true);
    await c.applyNow();
    // A PeerStatus after the apply: Status shows it at once, not at the next apply.
    const seen = {
      endpoint: 'dpu-a',
      reachable: true,
      offloaded: false,
      txPackets: 9,
      rxPackets: 8,
      lastError: '',
    };
    rig.dp.seen = new Map([['n2', [seen]]]);
    const st = c.status();
    expect(st.peers.map((p) => p.node)).to.deep.equal(['n2', 'n3']);
    expect(st.peers[0]?.endpoints).to.deep.equal([endpoint]);
    expect(st.peers[0]?.seenBy).to.deep.equal([seen]);
    const summary = c.status({ peers: false });
    expect(summary.peers).to.deep.equal([]);
    expect(summary.objects).to.deep.equal(st.objects);
    expect(summary.ready).to.equal(true);
    // The gauges still count every peer.
    expect(await rig.metrics.registry.getSingleMetricAsString('workloadnet_fabric_peers')).to.contain(
      'path="vxlan"} 2',
    );
  });

  it('applies nothing before the source has a full list, then the whole table', async () => {
    const c = rig.make();
    await c.start();
    rig.source.set([peer('n2', 2)], false);
    rig.source.set([peer('n2', 2), peer('n3', 3)], false);
    await c.applyNow();
    expect(rig.dp.applied).to.deep.equal([]);
    const st = c.status();
    expect(st.ready).to.equal(false);
    expect(st.reasons.join(' ')).to.include(
      'waiting for the peer source (manual) to deliver its first full list',
    );
    rig.source.set([peer('n2', 2), peer('n3', 3)]);
    await until(() => rig.dp.applied.length === 1, 5000, 'the first apply');
    expect(rig.dp.applied[0]).to.deep.equal(['n2', 'n3']);
    expect(c.status().ready).to.equal(true);
  });

  it('coalesces a burst of changes into one apply of the last table', async () => {
    const c = rig.make({ coalesceMs: 200 });
    await c.start();
    for (let i = 2; i < 12; i++)
      rig.source.set(Array.from({ length: i - 1 }, (_, j) => peer(`n${j + 2}`, j + 2)));
    await until(() => rig.dp.applied.length >= 1, 5000, 'an apply');
    // Longer than the coalescing delay: a second apply would have come by now.
    await new Promise((r) => setTimeout(r, 500));
    expect(rig.dp.applied.length).to.equal(1);
    expect(rig.dp.applied[0]).to.have.length(10);
    void c;
  });

  /** A started controller that applied n2 and n3, then was told n3 left the source (the 2nd apply). */
  async function startThenWithdrawN3(): Promise<ReturnType<typeof rig.make>> {
    const c = rig.make();
    await c.start();
    rig.source.set([peer('n2', 2), peer('n3', 3)]);
    await until(() => rig.dp.applied.length === 1);
    rig.source.set([peer('n2', 2)]);
    await until(() => rig.dp.applied.length === 2);
    return c;
  }

  it('keeps a peer that left the source programmed for the grace, then removes it', async () => {
    const c = await startThenWithdrawN3();
    expect(rig.dp.applied[1], 'still programmed within the grace').to.deep.equal(['n2', 'n3']);
    const row = c.status().peers.find((p) => p.node === 'n3');
    expect(row?.withdrawnAt, 'shown as withdrawing').to.be.a('string');
    expect(row?.reason).to.include('withdrawal grace');
    rig.clock += GRACE_MS - 1;
    await c.applyNow();
    expect(rig.dp.applied.at(-1)).to.deep.equal(['n2', 'n3']);
    rig.clock += 1;
    await c.applyNow();
    expect(rig.dp.applied.at(-1), 'gone once the grace is over').to.deep.equal(['n2']);
    expect(c.status().peers.map((p) => p.node)).to.deep.equal(['n2']);
  });

  it('cancels a withdrawal when the record comes back within the grace', async () => {
    const c = await startThenWithdrawN3();
    rig.clock += GRACE_MS / 2;
    // Back, with a new underlay: its own record wins over the one kept by the grace.
    rig.source.set([peer('n2', 2), { ...peer('n3', 3), underlay: ['192.0.2.33'] }]);
    await until(() => rig.dp.applied.length === 3);
    expect(rig.dp.applied[2], 'one entry, its own').to.deep.equal(['n2', 'n3']);
    expect(c.status().peers.find((p) => p.node === 'n3')?.withdrawnAt).to.equal(undefined);
    rig.clock += GRACE_MS;
    await c.applyNow();
    expect(rig.dp.applied.at(-1)).to.deep.equal(['n2', 'n3']);
    expect(rig.dp.tables.at(-1)?.find((p) => p.node === 'n3')?.underlay).to.deep.equal(['192.0.2.33']);
    expect(c.status().peers.find((p) => p.node === 'n3')?.withdrawnAt).to.equal(undefined);
  });

  it('applies nothing while the source has lost its full list, and keeps what is programmed', async () => {
    const c = rig.make();
    await c.start();
    rig.source.set([peer('n2', 2)]);
    await until(() => rig.dp.applied.length === 1);
    // A relist in progress: the table is partial, so nobody may be withdrawn on its word.
    rig.source.set([], false);
    await c.applyNow();
    expect(rig.dp.applied).to.have.length(1);
    expect(c.status().ready).to.equal(false);
  });

  it('with mode off prepares nothing, starts no source and is ready', async () => {
    const c = rig.make({ settings: undefined });
    await c.start();
    rig.source.set([peer('n2', 2)]);
    await c.applyNow();
    expect(rig.dp.prepared).to.deep.equal([]);
    expect(rig.source.started).to.equal(undefined);
    expect(rig.dp.applied).to.deep.equal([]);
    expect(c.status()).to.include({ mode: 'off', ready: true });
  });

  it('with mode external publishes this node and reports peers, programming nothing', async () => {
    const c = rig.make({ settings: { ...VXLAN_SETTINGS, mode: 'external' } });
    await c.start();
    await until(() => rig.source.started !== undefined);
    rig.source.set([peer('n2', 2)]);
    await until(() => c.status().peers.length === 1);
    expect(rig.dp.applied).to.deep.equal([]);
    const st = c.status();
    expect(st.ready).to.equal(true);
    expect(st.peers[0]).to.include({ node: 'n2', path: 'external' });
    expect(st.podMtu).to.equal(1500);
  });

  it('does not wait for a source that cannot list: start returns, and Status says why', async () => {
    rig.source.startGate = new Promise(() => undefined);
    const c = rig.make();
    await c.start();
    const st = c.status();
    expect(st.ready).to.equal(false);
    expect(st.reasons.join(' ')).to.include('first full list');
    expect(st.node).to.equal('n1');
  });

  it('says why when prepare is refused, and prepares again later', async () => {
    rig.dp.prepareError = new Error('UDP port 4789 is held by foreign device vx0');
    const c = rig.make({ retryMs: 20 });
    await c.start();
    expect(c.status().reasons).to.deep.equal([
      'fabric dataplane not prepared: UDP port 4789 is held by foreign device vx0',
    ]);
    expect(rig.source.started, 'nothing published before the dataplane is prepared').to.equal(undefined);
    rig.dp.prepareError = undefined;
    await until(() => rig.source.started !== undefined, 5000, 'a second prepare');
    rig.source.set([peer('n2', 2)]);
    await until(() => c.status().ready);
  });

  it('reports a failed apply and applies again at the next change', async () => {
    const c = rig.make();
    await c.start();
    rig.dp.applyError = new Error('RTNETLINK: Invalid argument');
    rig.source.set([peer('n2', 2)]);
    await until(() => c.status().reasons.some((r) => r.includes('applying the peer table failed')));
    expect(c.status().ready).to.equal(false);
    rig.dp.applyError = undefined;
    rig.source.set([peer('n2', 2), peer('n3', 3)]);
    await until(() => rig.dp.applied.length === 1);
    expect(c.status().ready).to.equal(true);
  });

  it('warns of a network whose MTU is larger than the fabric carries, without losing readiness', async () => {
    const mtus = new FabricPodMtu(VXLAN_SETTINGS);
    const net = (name: string, mtu: number, above = 0): FabricNetwork => ({
      name,
      config: { mtu },
      carried: () => mtus.carried(rig.dp),
      aboveFabric: () => above,
    });
    const c = rig.make({
      podMtu: mtus,
      networks: [net('default', 1500), net('small', 1400), net('auto', 0, 2)],
    });
    expect(mtus.carried(rig.dp)).to.equal(undefined);
    await c.start();
    // Learnt at prepare(), before the first peer list: an attach right after start gets it.
    expect(mtus.carried(rig.dp)).to.equal(1450);
    rig.source.set([peer('n2', 2)]);
    await until(() => rig.dp.applied.length === 1);
    const st = c.status();
    expect(st.podMtu).to.equal(1450);
    expect(st.warnings).to.deep.equal([
      'network default: mtu 1500 is larger than the vxlan fabric carries (1450); set its mtu to 1450 or less, or to 0 (auto)',
      'network auto: 2 attachment(s) run with a larger MTU than the vxlan fabric carries (1450); their large packets to other nodes are dropped until they are attached again',
    ]);
    expect(st.ready).to.equal(true);
  });

  it('tells the pod MTU of a changed node (a DPU come with its own uplink MTU) to the networks', async () => {
    const mtus = new FabricPodMtu(VXLAN_SETTINGS);
    const dpus = new DpuDataplane();
    await rig.make({ podMtu: mtus, dataplanes: [dpus] }).start();
    // No DPU yet: the node's own MTU less VXLAN.
    expect(mtus.carried(dpus)).to.equal(1450);
    dpus.setEndpoints([
      { ...dpu('dpu-a', 1), mtu: 9000 },
      { ...dpu('dpu-b', 2), underlay: 'fd00::b' },
    ]);
    // Each DPU encapsulates on its own uplink: 9000 - 50, and 1500 - 70 over IPv6.
    expect(mtus.carried(dpus, 'dpu-a')).to.equal(8950);
    expect(mtus.carried(dpus, 'dpu-b')).to.equal(1430);
    // Not placed, or on a DPU not listed: the smallest, which fits any.
    expect(mtus.carried(dpus)).to.equal(1430);
    expect(mtus.carried(dpus, 'dpu-c')).to.equal(1430);
    // The networks ask when they attach: an auto network's new interface on dpu-a.
    expect(mtus.auto(dpus, 'dpu-a')).to.equal(8950);
  });

  it('says so when no backend in use offers a fabric', async () => {
    const c = rig.make({ dataplanes: [], backends: ['dpu'] });
    await c.start();
    expect(c.status().reasons[0]).to.include('no backend in use offers a fabric (dpu)');
    expect(rig.source.started).to.equal(undefined);
  });

  it('sets the fabric gauges: peers by path, objects, repairs', async () => {
    const c = rig.make();
    await c.start();
    const noVtep = { ...peer('n4', 4) };
    delete noVtep.vtep;
    rig.source.set([peer('n2', 2), peer('n3', 3), noVtep]);
    await until(() => rig.dp.applied.length === 1);
    rig.dp.repairs = 3;
    c.observe();
    const text = await rig.metrics.registry.metrics();
    expect(text).to.match(/workloadnet_fabric_peers\{path="vxlan"\} 2/);
    expect(text).to.match(/workloadnet_fabric_peers\{path="unreachable"\} 1/);
    expect(text).to.match(/workloadnet_fabric_objects\{kind="routes"\} 3/);
    expect(text).to.match(/workloadnet_fabric_repairs_total 3/);
    expect(text).to.match(/workloadnet_fabric_ready 1/);
    c.observe();
    expect(await rig.metrics.registry.metrics(), 'repairs counted once').to.match(
      /workloadnet_fabric_repairs_total 3/,
    );
  });

  it("shows the source filter's counter and warnings, and counts the kernel's counter in the metric", async () => {
    const c = rig.make();
    await c.start();
    rig.source.set([peer('n2', 2)]);
    await until(() => rig.dp.applied.length === 1);
    expect(c.observe().filteredPackets, 'no filter, no counter').to.equal(undefined);
    expect(await rig.metrics.registry.metrics()).to.match(/workloadnet_fabric_filtered_packets_total 0/);
    // The kernel's counter outlived an earlier daemon: its value is counted whole, then what is new.
    rig.dp.filteredPackets = 40;
    expect(c.observe().filteredPackets).to.equal(40);
    rig.dp.filteredPackets = 45;
    c.observe();
    expect(await rig.metrics.registry.metrics()).to.match(/workloadnet_fabric_filtered_packets_total 45/);
    // A table made anew counts from zero.
    rig.dp.filteredPackets = 2;
    c.observe();
    expect(await rig.metrics.registry.metrics()).to.match(/workloadnet_fabric_filtered_packets_total 47/);
    rig.dp.warnings = ['VXLAN source filter off: nft is not installed (Debian package nftables); …'];
    const st = c.observe();
    expect(st.warnings).to.deep.equal(rig.dp.warnings);
    expect(st.ready, 'a warning, not a reason').to.equal(true);
  });

  it('stops the source and the dataplane, and leaves the kernel alone', async () => {
    const c = rig.make();
    await c.start();
    rig.source.set([peer('n2', 2)]);
    await until(() => rig.dp.applied.length === 1);
    await c.stop();
    expect(rig.source.stops).to.equal(1);
    expect(rig.dp.stopped).to.equal(1);
    expect(rig.dp.applied).to.have.length(1);
  });
});
