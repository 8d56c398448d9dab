import { expect } from 'chai';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { FabricReport, LocalNode } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { LinuxFabric, type LinuxFabricOptions } from '../../../backends/linux/fabric/linux-fabric';
import { ip, netnsExec } from '../../support/netns-fixture';
import { addRogueVtep, countSources, forge as forgeRequests } from '../../support/forged-traffic';
import { FabricTopology, settings, type BareNode, type TopologyNode } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { netnsPath } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { requireProgram } from '../../support/system-program';
import { waitUntil } from '../../support/wait-until';

// The VXLAN source filter against the real kernel: two nodes over VXLAN across the router, and a
// rogue namespace on node na's subnet with a VXLAN device of its own aimed at na, sending echo
// requests to na's pod as if from a pod of nc. Whether they reach the pod is read from a counter in
// the pod's own namespace; what the filter dropped, from the report.

const run = promisify(execFile);

async function nft(ns: string, ...args: string[]): Promise<string> {
  requireProgram('nft');
  const { stdout } = await run('ip', ['netns', 'exec', ns, 'nft', ...args], { encoding: 'utf8' });
  return stdout;
}

/** The addresses in one of our sets, sorted. */
async function setElements(ns: string, set: string): Promise<string[]> {
  const out = JSON.parse(await nft(ns, '-j', 'list', 'set', 'inet', 'workloadnet', set)) as {
    nftables: Array<{ set?: { elem?: string[] } }>;
  };
  return [...(out.nftables.find((o) => o.set)?.set?.elem ?? [])].sort();
}

async function tableExists(ns: string): Promise<boolean> {
  return (await nft(ns, 'list', 'tables')).includes('table inet workloadnet');
}

const FORGED = 20;

describeRoot('Linux fabric: the VXLAN source filter', function () {
  this.timeout(90_000);
  const topo = new FabricTopology();
  const locals = new Map<string, LocalNode>();
  let fabric: LinuxFabric;
  let fabricC: LinuxFabric;
  let na: TopologyNode;
  let rogue: BareNode;
  let tmp: string;

  const open = (n: TopologyNode, over: Partial<LinuxFabricOptions> = {}): LinuxFabric =>
    new LinuxFabric({ hostNetnsPath: netnsPath(n.ns), monitor: false, ...over });

  /** Sends FORGED echo requests from the rogue to na's pod; how many the pod received. */
  const forge = (from = '10.244.3.99', counter = 'forged'): Promise<number> =>
    forgeRequests({ from: rogue.ns, source: from, podNs: na.pod, podIp: na.podIp, counter, count: FORGED });

  async function filtered(f: LinuxFabric, atLeast: number): Promise<number> {
    let seen = -1;
    await waitUntil(() => {
      seen = f.report().filteredPackets ?? -1;
      return seen >= atLeast;
    }, `the filter's counter to reach ${atLeast}`);
    return seen;
  }

  const peersOfA = (extra: Peer[] = []): Peer[] => [...topo.peersOf('na', locals), ...extra];

  /** A peer that joins (the rogue, with a DPU endpoint beside it). */
  const newcomer: Peer = {
    node: 'nx',
    underlay: ['10.100.1.9'], // the rogue's
    mtu: 1500,
    vtep: { mac: '0e:77:0a:64:01:09', vni: 30574, port: 4789 },
    bootId: '',
    prefixes: ['10.244.9.0/24'],
    endpoints: [
      {
        id: 'dpu-a',
        underlay: '10.100.1.10',
        mtu: 1500,
        vtep: { mac: '0e:77:0a:64:01:0a', vni: 30574, port: 4789 },
        prefixes: ['10.244.9.0/26'],
      },
    ],
  };

  before(async () => {
    requireProgram('nft');
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wnf-filter-'));
    await topo.build([nodeSpec('na', 1, 1), nodeSpec('nc', 2, 3)]);
    na = topo.node('na');
    // A foreign table and a table of our name in another family: neither may ever change.
    await run('ip', [
      'netns',
      'exec',
      na.ns,
      'nft',
      'add table inet foreign; add set inet foreign s { type ipv4_addr; elements = { 10.100.1.9 } }; ' +
        'add chain inet foreign c { type filter hook input priority 0; policy accept; }; ' +
        'add rule inet foreign c udp dport 4789 accept; add table ip workloadnet; ' +
        'add chain ip workloadnet c { type filter hook input priority 5; policy accept; }',
    ]);
    await countSources(na.pod, { forged: '10.244.3.99', newcomer: '10.244.9.99' });
    rogue = await topo.addBareNode({ name: 'nx', subnet: 1, host: 9 });
    // The rogue's VXLAN device sends as a pod of nc's range (10.244.3.99) and of its own (10.244.9.99).
    await addRogueVtep({
      ns: rogue.ns,
      local: rogue.address,
      remote: na.address,
      podIp: na.podIp,
      sources: ['10.244.3.99', '10.244.9.99'],
    });

    fabric = open(na);
    fabricC = open(topo.node('nc'));
    locals.set('na', await fabric.prepare(settings('vxlan')));
    locals.set('nc', await fabricC.prepare(settings('vxlan')));
    await fabric.apply(peersOfA());
    await fabricC.apply(topo.peersOf('nc', locals));
  });

  after(async () => {
    await fabric.stop();
    await fabricC.stop();
    await topo.cleanup();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it("admits exactly the peers' underlay addresses, and their pods reach each other over VXLAN", async () => {
    expect(await setElements(na.ns, 'vxlan_peers4')).to.deep.equal(['10.100.2.3']);
    expect(await setElements(na.ns, 'vxlan_peers6')).to.deep.equal([]);
    const chain = await nft(na.ns, 'list', 'chain', 'inet', 'workloadnet', 'vxlan_input');
    expect(chain).to.match(/type filter hook input priority filter - 10; policy accept;/);
    expect(chain).to.match(/udp dport 4789 ip saddr != @vxlan_peers4 counter name "vxlan_filtered" drop/);
    expect(chain).to.match(
      /udp dport 4789 @ih,160,16 0x800 ip saddr \. @ih,272,32 != @vxlan_inner44 counter name "vxlan_filtered" drop/,
    );
    const opts = { count: 3, waitSeconds: 2, intervalSeconds: 0.2 };
    expect(await pings(na.pod, topo.node('nc').podIp, opts), 'na pod → nc pod').to.equal(true);
    expect(await pings(topo.node('nc').pod, na.podIp, opts), 'nc pod → na pod').to.equal(true);
    expect(fabric.report().warnings ?? []).to.deep.equal([]);
  });

  it("drops and counts a forged sender's VXLAN packets, which reach the pod without the filter", async () => {
    // Without the filter the attack works: the rogue's packets arrive in the pod.
    const off = open(na);
    await off.prepare(settings('vxlan', { sourceFilter: false }));
    await off.apply(peersOfA());
    expect(await tableExists(na.ns), 'sourceFilter false removes our table').to.equal(false);
    expect(await forge(), 'received by the pod without the filter').to.be.at.least(FORGED);
    await off.stop();

    await fabric.prepare(settings('vxlan'));
    await fabric.apply(peersOfA());
    const before = await filtered(fabric, 0);
    expect(await forge(), 'received by the pod with the filter').to.equal(0);
    expect(await filtered(fabric, before + FORGED)).to.be.at.least(before + FORGED);
    // The peer still gets through.
    expect(await pings(topo.node('nc').pod, na.podIp, { count: 2, waitSeconds: 2 })).to.equal(true);
  });

  it('admits a new peer (and its DPU endpoint) before any route to it exists', async () => {
    // nft, wrapped so that each run first writes down whether the new peer's route is in the kernel.
    const log = path.join(tmp, 'routes-at-nft.log');
    const wrapper = path.join(tmp, 'nft');
    fs.writeFileSync(
      wrapper,
      `#!/bin/sh\n{ echo "nft run:"; ip route show 10.244.9.0/24 proto 119; } >> ${log}\nexec nft "$@"\n`,
      { mode: 0o755 },
    );
    const wrapped = open(na, { nftCommand: wrapper });
    await wrapped.prepare(settings('vxlan'));
    const report = await wrapped.apply(peersOfA([newcomer]));
    await wrapped.stop();
    expect(report.ready).to.equal(true);
    // Two runs: the table is read (whose objects are ours), then programmed.
    expect(fs.readFileSync(log, 'utf8'), 'no route to the newcomer when nft ran').to.equal(
      'nft run:\nnft run:\n',
    );
    expect(await ip('-n', na.ns, 'route', 'show', '10.244.9.0/24', 'proto', '119')).to.match(
      /via 10\.244\.9\.64/,
    );
    expect(await setElements(na.ns, 'vxlan_peers4')).to.deep.equal([
      '10.100.1.10',
      '10.100.1.9',
      '10.100.2.3',
    ]);
    // Its packets (here, the rogue's, now a peer) are let in as its own pods, never as nc's.
    expect(await forge('10.244.9.99', 'newcomer'), 'received from a peer as its own pod').to.be.at.least(
      FORGED,
    );
    expect(await forge(), "a peer speaking as another node's pod").to.equal(0);
  });

  it('a withdrawn peer leaves the set when the table leaves it out, and is dropped again', async () => {
    await fabric.apply(peersOfA([newcomer]));
    expect(await setElements(na.ns, 'vxlan_peers4')).to.have.length(3);
    await fabric.apply(peersOfA());
    expect(await setElements(na.ns, 'vxlan_peers4')).to.deep.equal(['10.100.2.3']);
    const before = await filtered(fabric, 0);
    expect(await forge()).to.equal(0);
    await filtered(fabric, before + FORGED);
  });

  it('a restart adopts the table: the peers stay admitted while the daemon is away, and the counter is kept', async () => {
    const counted = await filtered(fabric, 1);
    await fabric.stop();
    expect(await setElements(na.ns, 'vxlan_peers4'), 'while stopped').to.deep.equal(['10.100.2.3']);
    fabric = open(na);
    await fabric.prepare(settings('vxlan'));
    expect(await setElements(na.ns, 'vxlan_peers4'), 'after prepare, before the first apply').to.deep.equal([
      '10.100.2.3',
    ]);
    const report: FabricReport = await fabric.apply(peersOfA());
    expect(report.filteredPackets, 'the kernel counter survived').to.be.at.least(counted);
    expect(await pings(topo.node('nc').pod, na.podIp, { count: 2, waitSeconds: 2 })).to.equal(true);
  });

  it('leaves a foreign table, and a table of our name in another family, untouched', async () => {
    const foreign = await nft(na.ns, 'list', 'table', 'inet', 'foreign');
    const ipTable = await nft(na.ns, 'list', 'table', 'ip', 'workloadnet');
    await fabric.apply(peersOfA());
    const routed = open(na);
    await routed.prepare(settings('routed'));
    expect(await tableExists(na.ns), 'routed mode runs no device: no filter of ours').to.equal(false);
    await routed.stop();
    expect(await nft(na.ns, 'list', 'table', 'inet', 'foreign')).to.equal(foreign);
    expect(await nft(na.ns, 'list', 'table', 'ip', 'workloadnet')).to.equal(ipTable);
    await fabric.prepare(settings('vxlan'));
    await fabric.apply(peersOfA());
    expect(await tableExists(na.ns)).to.equal(true);
  });

  it('a table deleted by hand is back, with the peers, at the next periodic pass', async () => {
    const periodic = open(na, { convergeIntervalMs: 300 });
    try {
      await periodic.prepare(settings('vxlan'));
      await periodic.apply(peersOfA());
      await nft(na.ns, 'delete', 'table', 'inet', 'workloadnet');
      await waitUntil(() => tableExists(na.ns), 'the table to be back');
      expect(await setElements(na.ns, 'vxlan_peers4')).to.deep.equal(['10.100.2.3']);
    } finally {
      await periodic.stop();
    }
  });

  it('without nft: the fabric works unfiltered and says so', async () => {
    await nft(na.ns, 'delete', 'table', 'inet', 'workloadnet');
    const bare = open(na, { nftCommand: '/nonexistent/nft' });
    await bare.prepare(settings('vxlan'));
    const report = await bare.apply(peersOfA());
    await bare.stop();
    expect(report.ready).to.equal(true);
    expect(report.filteredPackets).to.equal(undefined);
    expect(report.warnings).to.have.length(1);
    expect(report.warnings?.[0]).to.match(
      /^VXLAN source filter off: \/nonexistent\/nft is not installed \(Debian package nftables\); VXLAN packets are accepted from any source on UDP port 4789/,
    );
    expect(await pings(na.pod, topo.node('nc').podIp, { count: 2, waitSeconds: 2 })).to.equal(true);
    // Put it back for whatever runs next.
    await fabric.apply(peersOfA());
  });
});

describeRoot('Linux fabric: VXLAN under strict rp_filter', function () {
  this.timeout(60_000);
  const topo = new FabricTopology();
  const fabrics: LinuxFabric[] = [];

  before(async () => {
    await topo.build([nodeSpec('ra', 1, 1), nodeSpec('rc', 2, 3)]);
    const locals = new Map<string, LocalNode>();
    for (const n of topo.nodes) {
      for (const key of ['all', 'default', 'eth0'])
        await netnsExec(n.ns, 'sysctl', '-q', '-w', `net.ipv4.conf.${key}.rp_filter=1`);
      const f = new LinuxFabric({ hostNetnsPath: netnsPath(n.ns), monitor: false });
      fabrics.push(f);
      locals.set(n.name, await f.prepare(settings('vxlan')));
    }
    for (const [i, n] of topo.nodes.entries()) await fabrics[i]?.apply(topo.peersOf(n.name, locals));
  });

  after(async () => {
    for (const f of fabrics) await f.stop();
    await topo.cleanup();
  });

  // A decapsulated packet comes in on wn-vxlan with a remote pod's source, and the route back to that
  // pod is through wn-vxlan: the strict check passes without anything set on our device.
  it('pods reach pods across the router with rp_filter=1 on both nodes', async () => {
    for (const n of topo.nodes)
      expect((await netnsExec(n.ns, 'sysctl', '-n', 'net.ipv4.conf.wn-vxlan.rp_filter')).trim()).to.equal(
        '1',
      );
    const opts = { count: 3, waitSeconds: 2, intervalSeconds: 0.2 };
    expect(await pings(topo.node('ra').pod, topo.node('rc').podIp, opts), 'ra pod → rc pod').to.equal(true);
    expect(await pings(topo.node('rc').pod, topo.node('ra').podIp, opts), 'rc pod → ra pod').to.equal(true);
  });
});
