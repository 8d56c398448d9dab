import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FabricTopology, fabricRoutes, peersOf, type BareNode } from '../backends/linux/fabric-topology';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../pools/support/etcd-cluster';

// Ranges and routes from one source: three daemons claim address blocks from a real 3-member etcd and
// publish their node records there; the fabric each programs comes from what etcd says (hybrid: na and
// nb share a subnet, nc sits behind a router). Each daemon runs in the etcd cluster's namespace (it
// reaches etcd on that loopback) and programs its node namespace on the underlay (--host-netns). nc
// talks to one member only, so that cutting that member's client port cuts nc from etcd and nothing
// else: the underlay stays intact.

const CLUSTER = '10.244.0.0/16';
const LEASE_TTL_S = 2;
const GRACE_S = 10;

interface Node extends BareNode {
  dir: string;
  daemon?: DaemonProcess;
  pod?: string;
  podIp?: string;
}

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(
  `fabric from etcd between three daemons (hybrid; real etcd, real kernel)${SKIP}`,
  function () {
    this.timeout(180_000);
    const topo = new FabricTopology();
    const nodes: Node[] = [];
    let root: string;
    let etcd: EtcdCluster;
    /** nc's only member: its client port is what the cut drops. */
    let ncEndpoint: string;

    const node = (name: string): Node => nodes.find((n) => n.name === name) as Node;
    const cut = (on: boolean): void => {
      const port = new URL(ncEndpoint).port;
      execFileSync('ip', [
        ...['netns', 'exec', etcd.netns, 'iptables'],
        ...[on ? '-A' : '-D', 'INPUT', '-p', 'tcp', '--dport', port, '-j', 'DROP'],
      ]);
    };

    before(async () => {
      root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabetcd-'));
      etcd = await EtcdCluster.start(path.join(root, 'etcd'), 3, 'wn-fabetcd-');
      ncEndpoint = etcd.endpoints[2] as string;
      await topo.build([]);
      const config = path.join(root, 'config.json');
      fs.writeFileSync(
        config,
        JSON.stringify({ fabric: { leaseTtlSeconds: LEASE_TTL_S, withdrawGraceSeconds: GRACE_S } }),
      );
      for (const [name, subnet, host] of [
        ['na', 1, 1],
        ['nb', 1, 2],
        ['nc', 2, 3],
      ] as const) {
        const bare = await topo.addBareNode({ name, subnet, host });
        const n: Node = { ...bare, dir: path.join(root, name) };
        n.daemon = await DaemonProcess.start({
          dir: n.dir,
          netns: etcd.netns,
          args: [
            ...['--config', config, '--pool-source', 'etcd', '--node-name', name],
            ...['--etcd-endpoints', name === 'nc' ? ncEndpoint : etcd.endpoints.slice(0, 2).join(',')],
            ...['--cluster-cidr', CLUSTER, '--host-netns', `/var/run/netns/${bare.ns}`],
            ...['--fabric', 'hybrid', '--mtu', '1450'],
          ],
        });
        nodes.push(n);
      }
      for (const n of nodes) {
        const pod = topo.pool.add(`${n.name}pod`);
        await waitUntil(
          async () =>
            n
              .daemon!.client.call(n.daemon!.client.raw.attach, attachRequest(`${n.name}-pod`, pod.path))
              .then((res) => {
                n.podIp = (res.ips[0]?.cidr ?? '').split('/')[0];
                return true;
              }),
          `${n.name} attaches its pod once it holds a block`,
          30_000,
          { intervalMs: 200, retryOnError: true },
        );
        n.pod = pod.name;
      }
    });

    after(async () => {
      for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
      topo.cleanup();
      await etcd?.stop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    it("routes each peer's etcd blocks, directly on the subnet and over VXLAN across the router", async () => {
      const na = node('na');
      await waitUntil(async () => fabricRoutes(na.ns).length === 3, "na routes both peers' blocks", 30_000, {
        intervalMs: 200,
      });
      const [nbBlock] = peersOf(path.join(na.dir, 'api.sock')).find((p) => p.node === 'nb')?.prefixes ?? [];
      const [ncBlock] = peersOf(path.join(na.dir, 'api.sock')).find((p) => p.node === 'nc')?.prefixes ?? [];
      // nc's neighbour key is the tunnel address it publishes (an address of its own block): nc reserves
      // it once its block is claimed and publishes it again, so na may route nc's block on its first
      // address for a moment before.
      const ncKey = (): string | undefined => {
        const ncRecord = etcd.etcdctl('get', '/workloadnet/nodes/nc', '--print-value-only');
        return (JSON.parse(ncRecord) as { vtep?: { gateways?: { 4?: string } } }).vtep?.gateways?.[4];
      };
      await waitUntil(
        async () => {
          const key = ncKey();
          return key !== undefined && fabricRoutes(na.ns).some((r) => r.startsWith(`${ncBlock} via ${key} `));
        },
        "na keys nc's block on the tunnel address nc publishes",
        30_000,
        { intervalMs: 200 },
      );
      expect(fabricRoutes(na.ns)).to.have.members([
        `${nbBlock} via 10.100.1.2 dev eth0 metric 1024 mtu 1450`,
        `${ncBlock} via ${ncKey() ?? ''} dev wn-vxlan metric 1024 onlink mtu 1450`,
        `unreachable ${CLUSTER} metric 4294967295`,
      ]);
      for (const from of nodes)
        for (const to of nodes)
          if (from !== to)
            expect(
              await pings(from.pod as string, to.podIp as string, { count: 3, waitSeconds: 2 }),
              `${from.name} → ${to.name}`,
            ).to.equal(true);
    });

    it('keeps a node cut from etcd but not from the wire reachable past its lease', async () => {
      const na = node('na');
      const nc = node('nc');
      cut(true);
      try {
        await waitUntil(
          async () => peersOf(path.join(na.dir, 'api.sock')).some((p) => p.node === 'nc' && !!p.withdrawnAt),
          "nc's lease lapsed in na's view",
          30_000,
          { intervalMs: 200 },
        );
        expect(await pings(na.pod as string, nc.podIp as string, { count: 2 })).to.equal(true);
        expect(fabricRoutes(na.ns)).to.have.length(3);
      } finally {
        cut(false);
      }
      await waitUntil(
        async () => peersOf(path.join(na.dir, 'api.sock')).every((p) => !p.withdrawnAt),
        "nc's record back in na's view",
        30_000,
        { intervalMs: 200 },
      );
      expect(await pings(na.pod as string, nc.podIp as string)).to.equal(true);
    });

    it('keeps routing live peers whose block keys were deleted by hand until their owners claim them back', async () => {
      const na = node('na');
      const peers = peersOf(path.join(na.dir, 'api.sock'));
      const blocks = ['nb', 'nc'].map((name) => peers.find((p) => p.node === name)?.prefixes[0] ?? '');
      expect(blocks.every((b) => b !== '')).to.equal(true);
      const blockKeys = (): string[] =>
        etcd
          .etcdctl('get', '--prefix', '/workloadnet/blocks/', '--keys-only')
          .split('\n')
          .filter((k) => k !== '');
      expect(blockKeys().length).to.be.greaterThanOrEqual(3);
      etcd.etcdctl('del', '--prefix', '/workloadnet/blocks/');
      // Each owner claims its block back at its next check of etcd (its addresses are in use); until
      // then na must keep routing both: losing a prefix is a withdrawal, held through the grace.
      const missing: string[] = [];
      const owned = (): boolean => blocks.every((b) => blockKeys().some((k) => k.endsWith(b.replace('/', '-'))));
      const deadline = Date.now() + 40_000;
      while (!owned() && Date.now() < deadline) {
        const routes = fabricRoutes(na.ns);
        for (const b of blocks) if (!routes.some((r) => r.startsWith(`${b} `))) missing.push(b);
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(owned(), 'nb and nc claimed their blocks back').to.equal(true);
      expect(missing, 'samples where na had no route to a live peer').to.deep.equal([]);
      for (const to of ['nb', 'nc'])
        expect(await pings(na.pod as string, node(to).podIp as string), `na → ${to}`).to.equal(true);
    });

    it('withdraws a dead node after its lease and the grace, and only it', async () => {
      const na = node('na');
      const nb = node('nb');
      const [nbBlock] = peersOf(path.join(na.dir, 'api.sock')).find((p) => p.node === 'nb')?.prefixes ?? [];
      await nb.daemon?.kill('SIGKILL');
      nb.daemon = undefined;
      execFileSync('ip', ['-n', nb.ns, 'link', 'set', 'eth0', 'down']);
      await waitUntil(
        async () => !fabricRoutes(na.ns).some((r) => r.startsWith(`${nbBlock} `)),
        "nb's block withdrawn on na",
        (LEASE_TTL_S + GRACE_S) * 1000 + 30_000,
        { intervalMs: 200 },
      );
      expect(fabricRoutes(na.ns)).to.have.length(2);
      expect(await pings(na.pod as string, node('nc').podIp as string)).to.equal(true);
    });
  },
);
