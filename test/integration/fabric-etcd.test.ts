import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { FabricCluster, usualNodes, type ClusterNode } from '../support/fabric-cluster';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../support/etcd-cluster';

// Ranges and routes from one source: three daemons claim address blocks from a real 3-member etcd and
// publish their node records there; the fabric each programs comes from what etcd says (hybrid: na and
// nb share a subnet, nc sits behind a router). Each daemon runs in the etcd cluster's namespace (it
// reaches etcd on that loopback) and programs its node namespace on the underlay (--host-netns). nc
// talks to one member only, so that cutting that member's client port cuts nc from etcd and nothing
// else: the underlay stays intact.

const CLUSTER = '10.244.0.0/16';
const LEASE_TTL_S = 2;
const GRACE_S = 10;

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(
  `fabric from etcd between three daemons (hybrid; real etcd, real kernel)${SKIP}`,
  function () {
    this.timeout(180_000);
    let c: FabricCluster;
    let etcd: EtcdCluster;

    const node = (name: string): ClusterNode => c.node(name);
    const cut = (on: boolean): void => {
      // nc's only member: its client port is what the cut drops.
      const port = new URL(etcd.endpoints[2] as string).port;
      execFileSync('ip', [
        ...['netns', 'exec', etcd.netns, 'iptables'],
        ...[on ? '-A' : '-D', 'INPUT', '-p', 'tcp', '--dport', port, '-j', 'DROP'],
      ]);
    };
    const members = (from: number, to: number) => (k: FabricCluster) => ({
      'etcd-endpoints': (k.etcd as EtcdCluster).endpoints.slice(from, to).join(','),
    });

    before(async () => {
      c = await FabricCluster.start({
        source: 'etcd',
        fabric: 'hybrid',
        mtu: 1450,
        config: { fabric: { leaseTtlSeconds: LEASE_TTL_S, withdrawGraceSeconds: GRACE_S } },
        nodes: usualNodes({
          na: { flags: members(0, 2) },
          nb: { flags: members(0, 2) },
          nc: { flags: members(2, 3) },
        }),
        podsPerNode: 1,
      });
      etcd = c.etcd as EtcdCluster;
    });

    after(async () => {
      await c?.teardown();
    });

    it("routes each peer's etcd blocks, directly on the subnet and over VXLAN across the router", async () => {
      const na = node('na');
      await c.waitForRoutes(na, 3);
      const [nbBlock] = c.peersOf(na).find((p) => p.node === 'nb')?.prefixes ?? [];
      const [ncBlock] = c.peersOf(na).find((p) => p.node === 'nc')?.prefixes ?? [];
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
          return key !== undefined && c.routes(na).some((r) => r.startsWith(`${ncBlock} via ${key} `));
        },
        "na keys nc's block on the tunnel address nc publishes",
        30_000,
        { intervalMs: 200 },
      );
      expect(c.routes(na)).to.have.members([
        `${nbBlock} via 10.100.1.2 dev eth0 metric 1024 mtu 1450`,
        `${ncBlock} via ${ncKey() ?? ''} dev wn-vxlan metric 1024 onlink mtu 1450`,
        `unreachable ${CLUSTER} metric 4294967295`,
      ]);
      expect(await c.silentPairs(), 'pod pairs that did not answer').to.deep.equal([]);
    });

    it('keeps a node cut from etcd but not from the wire reachable past its lease', async () => {
      const na = node('na');
      cut(true);
      try {
        await waitUntil(
          async () => c.peersOf(na).some((p) => p.node === 'nc' && !!p.withdrawnAt),
          "nc's lease lapsed in na's view",
          30_000,
          { intervalMs: 200 },
        );
        expect(await pings(c.pod('na').ns, c.pod('nc').ip, { count: 2 })).to.equal(true);
        expect(c.routes(na)).to.have.length(3);
      } finally {
        cut(false);
      }
      await waitUntil(
        async () => c.peersOf(na).every((p) => !p.withdrawnAt),
        "nc's record back in na's view",
        30_000,
        { intervalMs: 200 },
      );
      expect(await pings(c.pod('na').ns, c.pod('nc').ip)).to.equal(true);
    });

    it('keeps routing live peers whose block keys were deleted by hand until their owners claim them back', async () => {
      const na = node('na');
      const peers = c.peersOf(na);
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
      const owned = (): boolean =>
        blocks.every((b) => blockKeys().some((k) => k.endsWith(b.replace('/', '-'))));
      const deadline = Date.now() + 40_000;
      while (!owned() && Date.now() < deadline) {
        const routes = c.routes(na);
        for (const b of blocks) if (!routes.some((r) => r.startsWith(`${b} `))) missing.push(b);
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(owned(), 'nb and nc claimed their blocks back').to.equal(true);
      expect(missing, 'samples where na had no route to a live peer').to.deep.equal([]);
      for (const to of ['nb', 'nc'])
        expect(await pings(c.pod('na').ns, c.pod(to).ip), `na → ${to}`).to.equal(true);
    });

    it('withdraws a dead node after its lease and the grace, and only it', async () => {
      const na = node('na');
      const nb = node('nb');
      const [nbBlock] = c.peersOf(na).find((p) => p.node === 'nb')?.prefixes ?? [];
      await c.stop(nb, 'SIGKILL');
      execFileSync('ip', ['-n', nb.ns, 'link', 'set', 'eth0', 'down']);
      await waitUntil(
        async () => !c.routes(na).some((r) => r.startsWith(`${nbBlock} `)),
        "nb's block withdrawn on na",
        (LEASE_TTL_S + GRACE_S) * 1000 + 30_000,
        { intervalMs: 200 },
      );
      expect(c.routes(na)).to.have.length(2);
      expect(await pings(c.pod('na').ns, c.pod('nc').ip)).to.equal(true);
    });
  },
);
