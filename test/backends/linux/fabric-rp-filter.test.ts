import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { Writable } from 'node:stream';
import { promisify } from 'node:util';
import { createLogger } from '../../../core/logger';
import type { OwnPrefixes } from '../../../core/fabric-dataplane';
import { ip, ipJson } from '../../support/netns-fixture';
import { FabricTopology, settings, type TopologyNode } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { NodeFabrics } from '../../support/node-fabrics';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { waitUntil } from '../../support/wait-until';

// Strict rp_filter (=1) on every node: traffic a node itself sends to a remote pod comes back only if
// it left with a source the peer routes through its VXLAN device. The node's gateway key (the first
// address of its lowest prefix, the peers' neighbour key for it) on wn-vxlan is that source.

const run = promisify(execFile);

async function strictRpFilter(ns: string): Promise<void> {
  for (const dev of ['all', 'default', 'eth0', 'wn-vxlan'])
    await run('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', `net.ipv4.conf.${dev}.rp_filter=1`]);
}

/** Global addresses on wn-vxlan, as `ip` prints them (address/prefix). */
async function deviceAddresses(ns: string): Promise<string[]> {
  const links = await ipJson<{ addr_info: Array<{ local: string; prefixlen: number; scope: string }> }>(
    ns,
    'addr',
    'show',
    'dev',
    'wn-vxlan',
  );
  return (links[0]?.addr_info ?? [])
    .filter((a) => a.scope === 'global')
    .map((a) => `${a.local}/${a.prefixlen}`)
    .sort();
}

const own = (n: TopologyNode, ranges = n.prefixes): OwnPrefixes => ({
  ranges,
  byEndpoint: new Map(),
  keyRanges: ranges,
});

describeRoot('Linux fabric: node → remote pod under strict rp_filter (real kernel)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  const fabrics = new NodeFabrics();

  before(async () => {
    await topo.build([
      nodeSpec('na', 1, 1, { v6: true }),
      nodeSpec('nb', 1, 2, { v6: true }),
      nodeSpec('nc', 2, 3),
    ]);
    for (const n of topo.nodes) {
      const f = fabrics.open(n);
      fabrics.locals.set(n.name, await f.prepare(settings('vxlan')));
      await strictRpFilter(n.ns);
    }
    for (const n of topo.nodes) {
      const r = await fabrics.of(n).apply(topo.peersOf(n.name, fabrics.locals), own(n));
      expect(r.ready, r.reasons.join('; ')).to.equal(true);
    }
  });

  after(async () => {
    await fabrics.stopAll();
    await topo.cleanup();
  });

  it("puts the node's gateway key on wn-vxlan: the first address of its lowest prefix, /32 and /128", async () => {
    expect(await deviceAddresses(topo.node('na').ns)).to.deep.equal(['10.244.1.0/32', 'fd10:0:1::/128']);
    expect(await deviceAddresses(topo.node('nc').ns)).to.deep.equal(['10.244.3.0/32']);
    // No duplicate address detection holds the IPv6 key back (the kernel's own link-local address goes
    // through it for a second after the device comes up: not ours, not looked at).
    const v6 = await ip(
      '-n',
      topo.node('na').ns,
      '-6',
      'addr',
      'show',
      'dev',
      'wn-vxlan',
      'scope',
      'global',
      'tentative',
    );
    expect(v6.trim()).to.equal('');
  });

  it('a node reaches remote pods over VXLAN with rp_filter=1 on both ends, across the router too', async () => {
    for (const [from, to] of [
      ['na', 'nb'],
      ['na', 'nc'],
      ['nc', 'nb'],
    ] as const)
      expect(
        await pings(topo.node(from).ns, topo.node(to).podIp, {
          count: 3,
          waitSeconds: 2,
          intervalSeconds: 0.2,
        }),
        `${from} node → ${to} pod`,
      ).to.equal(true);
    expect(
      await pings(topo.node('na').ns, topo.node('nb').podIp6 ?? '', { count: 2, waitSeconds: 2 }),
    ).to.equal(true);
  });

  it('without the key the peer drops the reply path, and the next apply puts the key back as a repair', async () => {
    const na = topo.node('na');
    await ip('-n', na.ns, 'addr', 'del', '10.244.1.0/32', 'dev', 'wn-vxlan');
    // The uplink's address is the source now: nb routes it back through its uplink and drops it.
    expect(
      await pings(na.ns, topo.node('nb').podIp, { count: 2, waitSeconds: 1, intervalSeconds: 0.2 }),
    ).to.equal(false);
    const before = fabrics.of(na).report().repairs;
    await fabrics.of(na).apply(topo.peersOf(na.name, fabrics.locals), own(na));
    // The kernel flushed the device's IPv4 routes and neighbours with its last IPv4 address: they are
    // put back in the same pass, and counted with the key.
    expect(fabrics.of(na).report().repairs).to.be.greaterThan(before);
    expect(await deviceAddresses(na.ns)).to.include('10.244.1.0/32');
    expect(
      await pings(na.ns, topo.node('nb').podIp, { count: 3, waitSeconds: 2, intervalSeconds: 0.2 }),
    ).to.equal(true);
  });

  it('the monitor puts a key deleted by hand back within a second', async () => {
    const nb = topo.node('nb');
    await fabrics.of(nb).stop();
    const f = fabrics.open(nb, { monitor: true });
    await f.prepare(settings('vxlan'));
    await f.apply(topo.peersOf(nb.name, fabrics.locals), own(nb));
    await ip('-n', nb.ns, 'addr', 'del', '10.244.2.0/32', 'dev', 'wn-vxlan');
    await waitUntil(
      async () => (await deviceAddresses(nb.ns)).includes('10.244.2.0/32'),
      'the key put back on nb',
      5000,
    );
    // The key goes back early in the pass; the pass counts it when it ends (under load, a moment later).
    await waitUntil(() => f.report().repairs >= 1, 'the repair counted', 5000);
  });

  it('a restart adopts the keys (nothing re-added); a prefix that goes takes its key, a foreign scope stays', async () => {
    const na = topo.node('na');
    await fabrics.of(na).stop();
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done): void {
        lines.push(chunk.toString());
        done();
      },
    });
    const f = fabrics.open(na, { logger: createLogger('info', sink) });
    await f.prepare(settings('vxlan'));
    const r = await f.apply(topo.peersOf(na.name, fabrics.locals), own(na));
    expect(r.repairs).to.equal(0);
    expect(lines.join('')).not.to.include('fabric gateway addresses changed');
    expect(await deviceAddresses(na.ns)).to.deep.equal(['10.244.1.0/32', 'fd10:0:1::/128']);
    // The IPv6 range goes: its key goes with it; the kernel's link-local address is not ours.
    await f.apply(topo.peersOf(na.name, fabrics.locals), own(na, ['10.244.1.0/24']));
    expect(await deviceAddresses(na.ns)).to.deep.equal(['10.244.1.0/32']);
    const linkLocal = await ip('-n', na.ns, '-6', 'addr', 'show', 'dev', 'wn-vxlan', 'scope', 'link');
    expect(linkLocal).to.match(/fe80::/);
    // A lower range arrives: the key moves to it (the peers' key moves the same way).
    await f.apply(topo.peersOf(na.name, fabrics.locals), own(na, ['10.244.1.0/24', '10.244.0.0/24']));
    expect(await deviceAddresses(na.ns)).to.deep.equal(['10.244.0.0/32']);
    await f.apply(topo.peersOf(na.name, fabrics.locals), own(na));
    expect(await deviceAddresses(na.ns)).to.deep.equal(['10.244.1.0/32', 'fd10:0:1::/128']);
  });
});
