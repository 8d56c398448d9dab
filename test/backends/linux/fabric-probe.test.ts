import { expect } from 'chai';
import type { PeerProbe } from '../../../core/fabric-dataplane';
import { ip } from '../../support/netns-fixture';
import { FabricTopology, settings } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { NodeFabrics } from '../../support/node-fabrics';
import { describeRoot } from '../../support/describe-root';
import { waitUntil } from '../../support/wait-until';

// Data-path probes against the real kernel: na probes nb directly (hybrid, same subnet) and nc through
// VXLAN (across the router), ICMP echo from a raw socket in na's namespace. nc's kernel answers on its
// gateway key; nb's on its underlay address.

describeRoot('Linux fabric: data-path probes (real kernel)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  const fabrics = new NodeFabrics();
  const changes: string[] = [];

  before(async () => {
    await topo.build([nodeSpec('na', 1, 1), nodeSpec('nb', 1, 2), nodeSpec('nc', 2, 3)]);
    for (const n of topo.nodes) {
      const f = fabrics.open(n);
      // Only na probes (1 s); the others only answer.
      const s = settings('hybrid', n.name === 'na' ? { probeIntervalSeconds: 1 } : {});
      fabrics.locals.set(n.name, await f.prepare(s));
    }
    fabrics.of('na').onProbeChange((node) => changes.push(node));
    for (const n of topo.nodes)
      await fabrics.of(n).apply(topo.peersOf(n.name, fabrics.locals), {
        ranges: n.prefixes,
        byEndpoint: new Map(),
        keyRanges: n.prefixes,
      });
  });

  after(async () => {
    await fabrics.stopAll();
    await topo.cleanup();
  });

  const probeOf = (node: string): PeerProbe | undefined => fabrics.of('na').probes().get(node);

  it('sees both peers reachable, with a round-trip time, over the direct route and through VXLAN', async () => {
    await waitUntil(
      () => probeOf('nb')?.state === 'reachable' && probeOf('nc')?.state === 'reachable',
      'nb and nc reachable by probe',
      15_000,
    );
    const nb = probeOf('nb');
    const nc = probeOf('nc');
    expect(nb?.target).to.equal(topo.node('nb').address);
    expect(nc?.target).to.equal('10.244.3.0');
    for (const p of [nb, nc]) {
      expect(p?.rttMs).to.be.a('number').within(0, 2000);
      expect(p?.medianRttMs).to.be.a('number').within(0, 2000);
      expect(p?.answered).to.equal(true);
      expect(p?.lost).to.equal(0);
    }
    // The report carries the probes too (Status reads it).
    const row = fabrics
      .of('na')
      .report()
      .peers.find((p) => p.node === 'nc');
    expect(row?.probe?.state).to.equal('reachable');
    expect(changes).to.include.members(['nb', 'nc']);
  });

  it('shows a peer degraded, still programmed, once its uplink is down; reachable again when it is back', async () => {
    const nc = topo.node('nc');
    await ip('-n', nc.ns, 'link', 'set', 'eth0', 'down');
    try {
      await waitUntil(() => probeOf('nc')?.state === 'degraded', 'nc degraded by probe', 20_000);
      expect(probeOf('nc')?.lost).to.be.at.least(3);
      // Degraded is not withdrawn: its route stays.
      const routes = await ip('-n', topo.node('na').ns, 'route', 'show', 'proto', '119');
      expect(routes).to.include('10.244.3.0/24 via 10.244.3.0 dev wn-vxlan');
      expect(probeOf('nb')?.state).to.equal('reachable');
    } finally {
      await ip('-n', nc.ns, 'link', 'set', 'eth0', 'up');
      await ip('-n', nc.ns, 'route', 'replace', 'default', 'via', '10.100.2.254');
    }
    await waitUntil(() => probeOf('nc')?.state === 'reachable', 'nc reachable again', 20_000);
  });
});
