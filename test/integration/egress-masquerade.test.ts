import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { EGRESS_TABLE } from '../../backends/linux/egress-masquerade';
import { attachRequest } from '../support/attach-request';
import type { DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import type { TestNamespace } from '../support/netns';
import { useNodeFixture } from '../support/node-fixture';
import { pings } from '../support/ping';
import { requireProgram } from '../support/system-program';
import { waitUntil } from '../support/wait-until';
import { countSources, nftIn } from '../support/netns-nft';

// The daemon as a node runs it (Linux backend, embedded defaults: masquerade on) in a test-owned node
// namespace whose uplink leads to an "outside" namespace that knows no pod range, as a router upstream
// of a node does not. A pod reaches the outside, seen there as the node; pod to pod keeps its source.

const POD_RANGE = '10.252.7.0/24';
const NODE_UPLINK = '198.51.100.1';
const OUTSIDE = '198.51.100.2';

const ip = (ns: string, ...args: string[]): void => void execFileSync('ip', ['-n', ns, ...args]);

describeRoot('egress masquerade through the daemon (root, test-owned namespaces)', function () {
  this.timeout(90_000);
  const fx = useNodeFixture({ prefix: 'wnegd-', shape: 'loopback' });
  let daemon: DaemonProcess;
  let outside: TestNamespace;
  const pods: Array<{ ns: TestNamespace; ip: string }> = [];
  const flags = { 'pod-cidr': POD_RANGE };

  before(async () => {
    requireProgram('nft');
    outside = fx.namespaces.add('out');
    ip(outside.name, 'link', 'set', 'lo', 'up');
    ip(fx.node, 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', outside.name);
    ip(fx.node, 'addr', 'add', `${NODE_UPLINK}/24`, 'dev', 'up0');
    ip(fx.node, 'link', 'set', 'up0', 'up');
    ip(fx.node, 'route', 'add', 'default', 'via', OUTSIDE);
    ip(outside.name, 'addr', 'add', `${OUTSIDE}/24`, 'dev', 'eth0');
    ip(outside.name, 'link', 'set', 'eth0', 'up');
    daemon = await fx.startDaemon({ flags });
    for (const id of ['eg-a', 'eg-b']) {
      const ns = fx.namespaces.add();
      const res = await daemon.client.call(daemon.client.raw.attach, attachRequest(id, ns.path));
      pods.push({ ns, ip: res.ip[0] ? ipText(res.ip[0]) : '' });
    }
  });

  it('lets a pod reach outside the cluster, seen there as the node, with its own address kept pod to pod', async () => {
    const [a, b] = pods as [(typeof pods)[0], (typeof pods)[0]];
    const seenOutside = countSources(outside.name, [NODE_UPLINK, a.ip]);
    const seenByB = countSources(b.ns.name, [a.ip]);
    // The table comes with the daemon's start; the first look may still be under way.
    await waitUntil(() => pings(a.ns.name, OUTSIDE), 'the pod to reach outside', 10_000);
    expect(await pings(a.ns.name, b.ip)).to.equal(true);
    const outsideCounts = seenOutside();
    expect(outsideCounts[NODE_UPLINK], 'echo from the node address').to.be.greaterThan(0);
    expect(outsideCounts[a.ip], 'echo from the pod address').to.equal(0);
    expect(seenByB()[a.ip], "echo from the other pod's own address").to.be.greaterThan(0);
  });

  it('keeps pods reaching outside while the daemon is down, and adopts its one table on restart', async () => {
    const [a] = pods as [(typeof pods)[0]];
    await daemon.kill('SIGKILL');
    expect(await pings(a.ns.name, OUTSIDE), 'while the daemon is down').to.equal(true);
    daemon = await fx.startDaemon({ flags });
    expect(await pings(a.ns.name, OUTSIDE), 'after the restart').to.equal(true);
    const tables = nftIn(fx.node, 'list tables\n')
      .split('\n')
      .filter((t) => t.includes(EGRESS_TABLE));
    expect(tables).to.have.length(1);
  });

  it('puts back a table deleted by hand', async () => {
    const [a] = pods as [(typeof pods)[0]];
    nftIn(fx.node, `delete table inet ${EGRESS_TABLE}\n`);
    expect(await pings(a.ns.name, OUTSIDE), 'with the table gone').to.equal(false);
    // The controller programs the table again on its refresh pass (every 15 looks of 2 s).
    await waitUntil(() => pings(a.ns.name, OUTSIDE, { waitSeconds: 1 }), 'the table back', 45_000);
  });
});

function ipText(raw: Uint8Array): string {
  return [...raw].join('.');
}
