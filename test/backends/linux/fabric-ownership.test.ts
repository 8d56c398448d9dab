import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { NodeFabrics } from '../../support/node-fabrics';
import { ip, ipJson, ipLine } from '../../support/netns-fixture';
import { FabricTopology, settings, type TopologyNode } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { describeRoot } from '../../support/describe-root';
import { rejection } from '../../support/expect-error';
import { requireProgram } from '../../support/system-program';

// Kernel objects with our names that are not ours: an operator's wn-vxlan, an operator's chain in our
// nftables table, a table of our name that we did not make. Each is left exactly as it was; what
// cannot be done because of it is refused in words.

const run = promisify(execFile);

async function nft(ns: string, ...args: string[]): Promise<string> {
  const { stdout } = await run('ip', ['netns', 'exec', ns, 'nft', ...args], { encoding: 'utf8' });
  return stdout;
}

interface LinkView {
  ifindex: number;
  ifalias?: string;
  linkinfo?: { info_kind?: string; info_data?: { id?: number; port?: number } };
}

describeRoot('Linux fabric: only what carries our mark is ours', function () {
  this.timeout(90_000);
  const topo = new FabricTopology();
  const fabrics = new NodeFabrics();
  let na: TopologyNode;

  const open = (): LinuxFabric => fabrics.open(na);
  const stopAll = (): Promise<void> => fabrics.stopAll();
  const device = async (): Promise<LinkView | undefined> =>
    (await ipJson<LinkView>(na.ns, '-d', 'link', 'show', 'wn-vxlan').catch(() => []))[0];

  before(async () => {
    requireProgram('nft');
    await topo.build([nodeSpec('na', 1, 1), nodeSpec('nc', 2, 3)]);
    na = topo.node('na');
    fabrics.locals.set('nc', { underlay: [topo.node('nc').address], uplink: 'eth0', mtu: 1500, subnets: [] });
  });

  afterEach(stopAll);

  after(async () => {
    await stopAll();
    await topo.cleanup();
  });

  it("leaves an operator's wn-vxlan intact and refuses, naming it and what to do", async () => {
    await ipLine(na.ns, 'link add wn-vxlan type vxlan id 42 dstport 4790 dev eth0');
    await ip('-n', na.ns, 'link', 'set', 'wn-vxlan', 'alias', 'operator tunnel');
    await ipLine(na.ns, 'neigh add 10.99.0.1 lladdr 02:00:00:00:00:42 dev wn-vxlan nud permanent');
    const was = await device();
    try {
      const refused = await rejection(open().prepare(settings('vxlan')), 'FAILED_PRECONDITION');
      expect(refused.message).to.match(
        /fabric: an interface named wn-vxlan exists \(vxlan, VNI 42, alias "operator tunnel"\) and is not ours .*rename or remove it/,
      );
      expect((await rejection(open().prepare(settings('hybrid')))).message).to.match(/is not ours/);
      // Routed runs no device, but cleans one of ours of our entries: never this one.
      const routed = open();
      await routed.prepare(settings('routed'));
      const report = await routed.apply(topo.peersOf('na', fabrics.locals));
      expect(report.ready, report.reasons.join('; ')).to.equal(true);
      const now = await device();
      expect(now?.ifindex, 'the same device').to.equal(was?.ifindex);
      expect(now?.ifalias).to.equal('operator tunnel');
      expect(now?.linkinfo?.info_data?.id).to.equal(42);
      expect(await ip('-n', na.ns, 'neigh', 'show', 'dev', 'wn-vxlan')).to.match(
        /10\.99\.0\.1 lladdr 02:00:00:00:00:42 PERMANENT/,
      );
    } finally {
      await ip('-n', na.ns, 'link', 'del', 'wn-vxlan');
    }
    // Once it is gone, the fabric makes its own.
    await open().prepare(settings('vxlan'));
    expect((await device())?.ifalias).to.equal('workloadnet fabric');
  });

  it("keeps an operator's chain in our table across a switch to routed, and removes only ours", async () => {
    const vxlan = open();
    fabrics.locals.set('na', await vxlan.prepare(settings('vxlan')));
    await vxlan.apply(topo.peersOf('na', fabrics.locals));
    await nft(
      na.ns,
      'add chain inet workloadnet operator { type filter hook input priority 0; policy accept; }; ' +
        'add rule inet workloadnet operator tcp dport 22 counter accept',
    );
    await stopAll();
    const routed = open();
    await routed.prepare(settings('routed'));
    await routed.apply(topo.peersOf('na', fabrics.locals));
    const table = await nft(na.ns, 'list', 'table', 'inet', 'workloadnet');
    expect(table).to.match(/chain operator \{[^}]*tcp dport 22 counter packets \d+ bytes \d+ accept/);
    expect(table, 'our chains, sets and counters are gone').to.not.match(/vxlan_|direct_/);
    await stopAll();
    // Back to vxlan: ours are made again beside it.
    const again = open();
    await again.prepare(settings('vxlan'));
    await again.apply(topo.peersOf('na', fabrics.locals));
    const after = await nft(na.ns, 'list', 'table', 'inet', 'workloadnet');
    expect(after).to.match(/chain operator \{/);
    expect(after).to.match(/chain vxlan_input \{/);
    await stopAll();
    await nft(na.ns, 'delete', 'chain', 'inet', 'workloadnet', 'operator');
    const routedAgain = open();
    await routedAgain.prepare(settings('routed'));
    expect(await nft(na.ns, 'list', 'tables'), 'nothing else in it: the table goes too').to.not.match(
      /inet workloadnet/,
    );
  });

  it('refuses, in words, a table of our name that we did not make, and never changes or deletes it', async () => {
    await nft(
      na.ns,
      'add table inet workloadnet; ' +
        'add chain inet workloadnet vxlan_input { type filter hook input priority 0; policy accept; }; ' +
        'add rule inet workloadnet vxlan_input udp dport 4789 counter accept',
    );
    const was = await nft(na.ns, 'list', 'table', 'inet', 'workloadnet');
    try {
      const vxlan = open();
      fabrics.locals.set('na', await vxlan.prepare(settings('vxlan')));
      const report = await vxlan.apply(topo.peersOf('na', fabrics.locals));
      expect(report.warnings?.join('\n')).to.match(
        /VXLAN source filter: table inet workloadnet exists and is not ours \(its comment is not "workloadnet fabric"\); rename or delete it/,
      );
      expect(await nft(na.ns, 'list', 'table', 'inet', 'workloadnet')).to.equal(was);
      await stopAll();
      await open().prepare(settings('routed'));
      expect(await nft(na.ns, 'list', 'table', 'inet', 'workloadnet')).to.equal(was);
    } finally {
      await nft(na.ns, 'delete', 'table', 'inet', 'workloadnet');
    }
  });
});
