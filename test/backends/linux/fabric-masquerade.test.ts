import { expect } from 'chai';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import type { LocalNode } from '../../../core/fabric-dataplane';
import { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { FabricTopology, settings, type TopologyNode } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { netnsPath } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { requireProgram } from '../../support/system-program';
import { waitUntil } from '../../support/wait-until';

// kube-proxy marks packets 0x4000 and masquerades marked ones (kubernetes#88986): the VXLAN device
// encapsulates in the host namespace and the outer packet keeps the mark, so without our notrack
// chains the outer UDP packets are NATed with a random source port. Here the sending node carries
// rules of that shape (marking everything), a pod sends several MB to a pod of the other node over
// VXLAN, and a counting rule just before the MASQUERADE tells whether an outer packet reached nat.

const run = promisify(execFile);
const BYTES = 8 * 1024 * 1024;
const PORT = 5201;

async function iptables(ns: string, ...args: string[]): Promise<string> {
  const { stdout } = await run('ip', ['netns', 'exec', ns, 'iptables', ...args], { encoding: 'utf8' });
  return stdout;
}

/** Packets of the outer VXLAN traffic that reached the nat POSTROUTING chain (first rule's counter). */
async function outerAtNat(ns: string): Promise<number> {
  const out = await iptables(ns, '-t', 'nat', '-L', 'POSTROUTING', '-v', '-n', '-x');
  const line = out.split('\n').find((l) => /udp dpt:4789/.test(l));
  if (line === undefined) throw new Error(`no counting rule in:\n${out}`);
  return Number(line.trim().split(/\s+/)[0]);
}

async function untracked(ns: string): Promise<number> {
  const { stdout } = await run(
    'ip',
    ['netns', 'exec', ns, 'nft', 'list', 'counter', 'inet', 'workloadnet', 'vxlan_untracked'],
    { encoding: 'utf8' },
  );
  return Number(/packets (\d+)/.exec(stdout)?.[1] ?? NaN);
}

const SERVER = `
const n = require('net');
const s = n.createServer((c) => { let got = 0; c.on('data', (d) => { got += d.length; });
  c.on('end', () => c.end(String(got))); });
s.listen(${PORT}, '0.0.0.0', () => console.log('listening'));
`;
const CLIENT = `
const n = require('net');
const c = n.connect(${PORT}, process.argv[1], () => { c.end(Buffer.alloc(${BYTES}, 7)); });
let reply = ''; c.on('data', (d) => { reply += d; }); c.on('end', () => { console.log(reply); });
c.on('error', (e) => { console.error(e.message); process.exit(2); });
`;

describeRoot('Linux fabric: VXLAN under kube-proxy-like masquerade rules', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  const fabrics: LinuxFabric[] = [];
  let server: ChildProcess | undefined;
  let ma: TopologyNode;
  let mc: TopologyNode;
  const locals = new Map<string, LocalNode>();

  before(async () => {
    requireProgram('nft');
    requireProgram('iptables');
    await topo.build([nodeSpec('ma', 1, 1), nodeSpec('mc', 2, 3)]);
    ma = topo.node('ma');
    mc = topo.node('mc');
    for (const n of topo.nodes) {
      const f = new LinuxFabric({ hostNetnsPath: netnsPath(n.ns), monitor: false });
      fabrics.push(f);
      locals.set(n.name, await f.prepare(settings('vxlan')));
    }
    for (const [i, n] of topo.nodes.entries()) await fabrics[i]?.apply(topo.peersOf(n.name, locals));
    // kube-proxy's shape on the sending node, marking everything so that the outer packets carry it.
    const rule = (line: string): Promise<string> => iptables(ma.ns, ...line.split(' '));
    await rule('-t mangle -A OUTPUT -j MARK --set-xmark 0x4000/0x4000');
    await rule('-t mangle -A PREROUTING -j MARK --set-xmark 0x4000/0x4000');
    await rule('-t nat -A POSTROUTING -p udp --dport 4789 -m mark --mark 0x4000/0x4000');
    await rule('-t nat -A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE --random-fully');
  });

  after(async () => {
    server?.kill();
    for (const f of fabrics) await f.stop();
    await topo.cleanup();
  });

  it('a pod-to-pod transfer of several MB completes, and no outer packet reaches nat', async () => {
    server = spawn('ip', ['netns', 'exec', mc.pod, process.execPath, '-e', SERVER], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let listening = false;
    server.stdout?.setEncoding('utf8').on('data', (d: string) => (listening ||= d.includes('listening')));
    await waitUntil(() => listening, 'the server in the pod to listen');
    const { stdout } = await run('ip', ['netns', 'exec', ma.pod, process.execPath, '-e', CLIENT, mc.podIp], {
      encoding: 'utf8',
      timeout: 90_000,
    });
    expect(stdout.trim(), 'bytes the receiving pod got').to.equal(String(BYTES));
    expect(await outerAtNat(ma.ns), 'outer VXLAN packets seen by nat POSTROUTING').to.equal(0);
    // Nothing crossed the fabric before this transfer: what the counter holds, it counted now.
    expect(await untracked(ma.ns), 'our notrack counter').to.be.greaterThan(0);
    expect(await untracked(mc.ns), 'the receiving node leaves them untracked too').to.be.greaterThan(0);
  });

  it('with the source filter off (and with it the notrack chains), the outer packets do reach nat', async () => {
    const off = new LinuxFabric({ hostNetnsPath: netnsPath(ma.ns), monitor: false });
    try {
      await off.prepare(settings('vxlan', { sourceFilter: false }));
      await off.apply(topo.peersOf('ma', locals));
      const before = await outerAtNat(ma.ns);
      await run('ip', ['netns', 'exec', ma.pod, 'ping', '-c', '2', '-i', '0.2', '-W', '2', mc.podIp]);
      expect(await outerAtNat(ma.ns), 'outer VXLAN packets seen by nat POSTROUTING').to.be.greaterThan(
        before,
      );
    } finally {
      await off.stop();
      // Put the table back for the fabric of the other test.
      await fabrics[0]?.prepare(settings('vxlan'));
      await fabrics[0]?.apply(topo.peersOf('ma', locals));
    }
  });
});
