import { expect } from 'chai';
import { execFile, spawn } from 'node:child_process';
import type { LocalNode } from '../../../core/fabric-dataplane';
import { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { ip } from '../../support/netns-fixture';
import { FabricTopology, settings } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { netnsPath } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { waitUntil } from '../../support/wait-until';

// A peer that publishes a smaller uplink MTU is routed at what its pods carry, and a change of it is
// followed without a restart: two nodes in VXLAN mode across the router, nb's uplink lowered below the
// underlay's 1500. A don't-fragment packet too large for nb's uplink once encapsulated is refused where
// it is sent, with the MTU that fits, instead of being dropped in silence at nb's uplink.

/** One don't-fragment ping of `size` bytes of IP packet from a namespace; its output and outcome. */
function dfPing(ns: string, to: string, size: number): Promise<{ ok: boolean; out: string }> {
  // 20 bytes of IP header and 8 of ICMP header around the payload.
  const args = ['netns', 'exec', ns, 'ping', '-M', 'do', '-c', '1', '-W', '2', '-s', String(size - 28), to];
  return new Promise((resolve) =>
    execFile('ip', args, (err, stdout, stderr) => resolve({ ok: err === null, out: `${stdout}${stderr}` })),
  );
}

/** The MTU our route to `prefix` carries in a namespace (NaN without one). */
async function routeMtu(ns: string, prefix: string): Promise<number> {
  return Number(/ mtu (\d+)/.exec(await ip('-n', ns, 'route', 'show', prefix, 'proto', '119'))?.[1]);
}

/**
 * Expects a don't-fragment packet of `mtu` bytes from `ns` to reach `to`, and one of `larger` bytes to be
 * refused where it is sent, with `mtu` named in the error.
 */
async function expectPathMtu(ns: string, to: string, mtu: number, larger: number): Promise<void> {
  const fits = await dfPing(ns, to, mtu);
  expect(fits.ok, fits.out).to.equal(true);
  const large = await dfPing(ns, to, larger);
  expect(large.ok, large.out).to.equal(false);
  expect(large.out, large.out).to.match(new RegExp(`mtu ?=? ?${mtu}`));
}

describeRoot("fabric routes follow a peer's published MTU (vxlan; real kernel)", function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  const fabrics = new Map<string, LinuxFabric>();
  const locals = new Map<string, LocalNode>();

  /** A fresh fabric object on the node (its daemon started again), prepared: what it would publish. */
  async function start(node: string): Promise<void> {
    await fabrics.get(node)?.stop();
    const f = new LinuxFabric({ hostNetnsPath: netnsPath(topo.node(node).ns), monitor: false });
    fabrics.set(node, f);
    locals.set(node, await f.prepare(settings('vxlan')));
  }

  const apply = (node: string): ReturnType<LinuxFabric['apply']> =>
    (fabrics.get(node) as LinuxFabric).apply(topo.peersOf(node, locals));

  before(async () => {
    await topo.build([nodeSpec('na', 1, 1), nodeSpec('nb', 2, 2)]);
    // nb's uplink is smaller than the underlay's: it publishes 1400, its overlay carries 1350.
    await ip('-n', topo.node('nb').ns, 'link', 'set', 'eth0', 'mtu', '1400');
    for (const n of ['na', 'nb']) await start(n);
    for (const n of ['na', 'nb']) await apply(n);
  });

  after(async () => {
    for (const f of fabrics.values()) await f.stop();
    await topo.cleanup();
  });

  it('routes to the peer at the MTU its pods carry, delivers what fits and refuses more where it is sent', async () => {
    const na = topo.node('na');
    const nb = topo.node('nb');
    expect(locals.get('nb')?.mtu, 'what nb publishes').to.equal(1400);
    expect(await routeMtu(na.ns, nb.prefix)).to.equal(1350);
    // nb routes at its own pod MTU, which is the smaller there.
    expect(await routeMtu(nb.ns, na.prefix)).to.equal(1350);

    // 1422 fits our pod's 1450 but not nb's uplink once encapsulated: told, never lost in silence.
    await expectPathMtu(na.pod, nb.podIp, 1350, 1422);
  });

  it("replaces the route in place when the peer's MTU changes, without a restart of this node", async () => {
    const na = topo.node('na');
    const nb = topo.node('nb');
    const repairsBefore = (fabrics.get('na') as LinuxFabric).report().repairs;
    // nb's uplink is lowered again and its daemon restarted: it publishes 1300. na is only told.
    await ip('-n', nb.ns, 'link', 'set', 'eth0', 'mtu', '1300');
    await start('nb');
    await apply('nb');
    expect(locals.get('nb')?.mtu).to.equal(1300);

    const monitor = spawn('ip', ['-n', na.ns, 'monitor', 'route'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let seen = '';
    monitor.stdout.on('data', (d: Buffer) => (seen += d.toString()));
    try {
      await new Promise((r) => setTimeout(r, 300));
      const report = await apply('na');
      expect(report.ready, report.reasons.join('; ')).to.equal(true);
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      monitor.kill();
    }
    expect(await routeMtu(na.ns, nb.prefix)).to.equal(1250);
    const changes = seen.split('\n').filter((l) => l.includes(nb.prefix));
    expect(changes.length, seen).to.be.greaterThan(0);
    expect(
      changes.filter((l) => l.startsWith('Deleted')),
      'replaced in place, never deleted and added',
    ).to.deep.equal([]);
    expect((fabrics.get('na') as LinuxFabric).report().repairs, 'a change, not a repair').to.equal(
      repairsBefore,
    );

    await expectPathMtu(na.pod, nb.podIp, 1250, 1350);
  });

  it("follows its own uplink's MTU without a restart: the device, its routes and what it publishes", async () => {
    const na = topo.node('na');
    const nb = topo.node('nb');
    // A fabric whose drift monitor runs, as the daemon's does: the uplink's link notification is heard.
    await fabrics.get('na')?.stop();
    const f = new LinuxFabric({ hostNetnsPath: netnsPath(na.ns), convergeIntervalMs: 600_000 });
    fabrics.set('na', f);
    const told: LocalNode[] = [];
    f.onLocalChange((l) => told.push(l));
    locals.set('na', await f.prepare(settings('vxlan')));
    await apply('na');
    const device = async (): Promise<number> =>
      Number(/ mtu (\d+)/.exec(await ip('-n', na.ns, 'link', 'show', 'wn-vxlan'))?.[1]);
    expect(await device()).to.equal(1450);

    await ip('-n', na.ns, 'link', 'set', 'eth0', 'mtu', '1380');
    await waitUntil(() => told.length > 0, 'the fabric to tell of its new MTU', 5_000, { intervalMs: 50 });
    expect(told.at(-1)?.mtu, 'what na publishes now').to.equal(1380);
    expect(await device()).to.equal(1330);
    // The smaller of na's pod MTU now and what nb's pods carry (1250, from the test before).
    await waitUntil(async () => (await routeMtu(na.ns, nb.prefix)) === 1250, 'the route at 1250', 5_000);
    await ip('-n', na.ns, 'link', 'set', 'eth0', 'mtu', '1200');
    await waitUntil(() => told.at(-1)?.mtu === 1200, 'told again at 1200', 5_000, { intervalMs: 50 });
    await waitUntil(async () => (await routeMtu(na.ns, nb.prefix)) === 1150, 'the route at 1150', 5_000);
    expect(await device()).to.equal(1150);
  });
});
