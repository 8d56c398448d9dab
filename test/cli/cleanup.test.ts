import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { EgressMasquerade } from '../../backends/linux/egress-masquerade';
import { HostPolicy } from '../../backends/linux/policy/host-policy';
import { nftRunner } from '../../backends/linux/fabric/nft-runner';
import { LinuxFabric } from '../../backends/linux/fabric/linux-fabric';
import { DEFAULT_CONFIG } from '../../core/config';
import { NodeLock } from '../../core/daemon/node-lock';
import { silentLogger } from '../../core/logger';
import { vtepMac } from '../../lib/vtep-mac';
import { FabricTopology, settings, type BareNode } from '../support/fabric-topology';
import { DaemonProcess } from '../support/daemon-process';
import { expectHelpSnapshot, runCliAsync } from '../support/cli-run';
import { nftIn } from '../support/netns-nft';
import { describeRoot } from '../support/describe-root';
import { netnsPath } from '../support/netns';
import { requireProgram } from '../support/system-program';
import { attachRequest } from '../support/attach-request';
import { StandInKubeApiServer } from '../support/standin-kube-apiserver';

// `workloadnet cleanup` on a node namespace the fabric and the egress masquerade programmed, beside
// objects of others with our names or in our range: ours go, theirs stay; a daemon holding the node,
// or attachments still recorded, make it refuse having changed nothing.

const sh = (ns: string, ...args: string[]): string =>
  execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' });
const tables = (ns: string): string =>
  execFileSync('ip', ['netns', 'exec', ns, 'nft', 'list', 'tables'], { encoding: 'utf8' });

describe('workloadnet cleanup --help', () => {
  it('prints the same --help as its snapshot, with examples', () => expectHelpSnapshot(['cleanup']));
});

describeRoot('workloadnet cleanup (root, test-owned namespaces)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  let dir: string;
  let node: BareNode;
  let conf: string;
  let bin: string;

  /** The fabric (two peers), the egress table, a foreign route and a foreign table, and a conf dir. */
  async function program(): Promise<void> {
    const fabric = new LinuxFabric({ hostNetnsPath: netnsPath(node.ns), monitor: false });
    await fabric.prepare(settings('vxlan'));
    const peer = (name: string, host: number, third: number) => ({
      node: name,
      underlay: [`10.100.1.${host}`],
      mtu: 1500,
      vtep: { mac: vtepMac(`10.100.1.${host}`), vni: 30574, port: 4789 },
      bootId: '',
      prefixes: [`10.244.${third}.0/24`],
    });
    await fabric.apply([peer('p2', 2, 2), peer('p3', 3, 3)]);
    await fabric.stop();
    await new EgressMasquerade(nftRunner({ netnsPath: netnsPath(node.ns) })).apply({
      pod: ['10.244.1.0/24'],
      cluster: ['10.244.0.0/16'],
    });
    const policy = new HostPolicy(netnsPath(node.ns));
    await policy.apply({ sets: new Map(), pods: new Map() });
    await policy.close();
    fs.mkdirSync(conf, { recursive: true });
    fs.mkdirSync(bin, { recursive: true });
    fs.writeFileSync(
      path.join(conf, '05-workloadnet.conflist'),
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'workloadnet',
        'workloadnet.managedBy': 'workloadnet install-cni',
        plugins: [],
      }),
    );
    fs.writeFileSync(path.join(conf, '10-flannel.conflist.workloadnet-disabled'), '{"name":"cbr0"}');
    fs.writeFileSync(path.join(conf, '20-other.conflist'), '{"name":"other"}');
    fs.writeFileSync(path.join(bin, 'workloadnet'), 'ELF… workloadnet-cni/1.0 …');
  }

  before(async function () {
    requireProgram('nft');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-cleanup-'));
    conf = path.join(dir, 'net.d');
    bin = path.join(dir, 'bin');
    await topo.build([]);
    node = await topo.addBareNode({ name: 'n1', subnet: 1, host: 1 });
    // Others' objects: a route of another protocol inside our cluster range, a table named like ours.
    sh(node.ns, 'route', 'add', '10.244.9.0/24', 'via', '10.100.1.254', 'proto', 'static');
    nftIn(node.ns, 'table inet workloadnet_egress_old { }\n');
    await program();
  });

  after(async () => {
    await topo.cleanup();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const flags = (): string[] => [
    ...['--host-netns', netnsPath(node.ns), '--state-dir', path.join(dir, 'state')],
    ...['--conf-dir', conf, '--bin-dir', bin],
  ];

  it('refuses while a daemon holds the node, having changed nothing', async () => {
    const lock = new NodeLock(
      {
        ...DEFAULT_CONFIG,
        socket: '/run/x.sock',
        linux: { ...DEFAULT_CONFIG.linux, hostNetns: netnsPath(node.ns) },
      },
      silentLogger(),
    );
    await lock.start();
    try {
      const r = await runCliAsync(['cleanup', ...flags()]);
      expect(r.code, r.stderr).to.equal(3);
      expect(r.stderr).to.include('another daemon is already serving');
    } finally {
      await lock.stop();
    }
    expect(sh(node.ns, 'link', 'show', 'wn-vxlan')).to.include('wn-vxlan');
    expect(fs.existsSync(path.join(conf, '05-workloadnet.conflist'))).to.equal(true);
  });

  it('says what it would remove with --dry-run, and removes nothing', async () => {
    const r = await runCliAsync(['cleanup', '--dry-run', ...flags()]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.match(/would remove \d+ routes of ours/);
    expect(r.stdout).to.include('would remove VXLAN device wn-vxlan');
    expect(r.stdout).to.include(
      'would remove nftables table inet workloadnet_egress (the egress masquerade)',
    );
    expect(r.stdout).to.include('would remove nftables table inet workloadnet_policy (NetworkPolicy)');
    expect(r.stdout).to.include('would rename');
    expect(sh(node.ns, 'link', 'show', 'wn-vxlan')).to.include('wn-vxlan');
    expect(sh(node.ns, 'route', 'show', 'proto', '119')).to.include('10.244.2.0/24');
    expect(tables(node.ns)).to.include('table inet workloadnet_egress\n');
  });

  it("removes the fabric's routes, device and tables and the CNI config; leaves others' objects", async () => {
    const r = await runCliAsync(['cleanup', ...flags()]);
    expect(r.code, r.stdout + r.stderr).to.equal(0);
    expect(sh(node.ns, '-o', 'link', 'show')).to.not.include('wn-vxlan');
    expect(sh(node.ns, 'route', 'show', 'proto', '119')).to.equal('');
    expect(sh(node.ns, '-6', 'route', 'show', 'proto', '119')).to.equal('');
    expect(sh(node.ns, 'route', 'show')).to.include('10.244.9.0/24 via 10.100.1.254');
    expect(tables(node.ns)).to.not.include('table inet workloadnet_egress\n');
    expect(tables(node.ns)).to.not.include('table inet workloadnet_policy');
    expect(tables(node.ns)).to.include('table inet workloadnet_egress_old');
    expect(fs.readdirSync(conf).sort()).to.deep.equal(['10-flannel.conflist', '20-other.conflist']);
    expect(fs.existsSync(path.join(bin, 'workloadnet'))).to.equal(false);
    expect(r.stdout).to.include('left: the state store');
    // Again: nothing of ours is left to find.
    const again = await runCliAsync(['cleanup', ...flags()]);
    expect(again.code).to.equal(0);
    expect(again.stdout).to.include('nothing of workloadnet found on this node');
  });

  it("removes this node's fabric annotation from its Node (Kubernetes source), and only that", async () => {
    const api = await StandInKubeApiServer.start(path.join(dir, 'api'));
    try {
      api.setNode('n1', ['10.244.1.0/24']);
      api.setNode('n2', ['10.244.2.0/24']);
      for (const n of ['n1', 'n2'])
        api.setAnnotation(n, 'workloadnet.io/fabric', '{"mtu":1500,"bootId":"b"}');
      api.setAnnotation('n1', 'example.com/other', 'kept');
      const config = path.join(dir, 'k8s.json');
      fs.writeFileSync(
        config,
        JSON.stringify({ poolSource: 'kubernetes', nodeName: 'n1', kubeconfig: api.kubeconfig() }),
      );
      const dry = await runCliAsync(['cleanup', '--dry-run', '-c', config, ...flags()]);
      expect(dry.code, dry.stderr).to.equal(0);
      expect(dry.stdout).to.include('would remove the workloadnet.io/fabric annotation of Node n1');
      expect(api.node('n1')?.metadata.annotations?.['workloadnet.io/fabric']).to.be.a('string');
      const r = await runCliAsync(['cleanup', '-c', config, ...flags()]);
      expect(r.code, r.stdout + r.stderr).to.equal(0);
      expect(api.node('n1')?.metadata.annotations).to.deep.equal({ 'example.com/other': 'kept' });
      expect(api.node('n2')?.metadata.annotations?.['workloadnet.io/fabric']).to.be.a('string');
    } finally {
      await api.stop();
    }
  });

  it('refuses while the store records attachments, unless forced', async () => {
    const state = path.join(dir, 'd1');
    const pod = topo.pool.add('pod');
    const d = await DaemonProcess.start({ dir: state, netns: node.ns });
    await d.client.call(d.client.raw.attach, attachRequest('w1', pod.path));
    await d.stop();
    await program();
    const withStore = flags().map((f) => (f === path.join(dir, 'state') ? path.join(state, 'state') : f));
    const r = await runCliAsync(['cleanup', ...withStore]);
    expect(r.code, r.stdout).to.equal(3);
    expect(r.stderr).to.match(/still records 1 attachments/);
    expect(sh(node.ns, 'link', 'show', 'wn-vxlan')).to.include('wn-vxlan');
    const forced = await runCliAsync(['cleanup', '--force', ...withStore]);
    expect(forced.code, forced.stderr).to.equal(0);
    expect(sh(node.ns, '-o', 'link', 'show')).to.not.include('wn-vxlan');
  });
});
