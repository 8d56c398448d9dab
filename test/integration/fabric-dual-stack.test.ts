import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { bridge, peersOf, pingOutput } from '../support/fabric-topology';
import { FabricCluster, usualNodes, type ClusterNode } from '../support/fabric-cluster';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../support/etcd-cluster';
import { vtepMac } from '../../lib/vtep-mac';

/** The VTEP MACs the etcd source's daemons derive from their names and underlay addresses. */
const NB_MAC = vtepMac('10.100.1.2', 'nb');
const NC_MAC = vtepMac('10.100.2.3', 'nc');

// IPv6 pods across nodes over an IPv4 underlay: three daemons claim dual-stack blocks from a real
// 3-member etcd (one IPv4 and one IPv6 cluster range) and program the fabric from the node records and
// block ownership there; na and nb share a subnet, nc sits behind a router. Two pods per node, attached
// through the API. An IPv6 packet cannot be routed to an IPv4 next hop, so IPv6 crosses to every
// peer over VXLAN — in vxlan mode, and in hybrid mode too, even to a peer on the same subnet (whose
// IPv4 goes direct) — and routed mode, which has no tunnel, reports the IPv6 prefixes not routed and
// leaves their traffic to the catch-all, which refuses it at once.

const CLUSTER6 = 'fd10::/48';

interface Pod {
  ns: string;
  ip4: string;
  ip6: string;
}

interface Node extends ClusterNode {
  /** Its pods' addresses by family. */
  dual: Pod[];
}

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

/** Lines of `ip` output in a namespace, trimmed and sorted. */
function lines(ns: string, ...args: string[]): string[] {
  return execFileSync('ip', ['-n', ns, ...args], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .sort();
}

/** IPv6 fabric routes of ours (protocol 119) in a node namespace. */
const routes6 = (ns: string): string[] => lines(ns, '-6', 'route', 'show', 'proto', '119');
/** Permanent neighbours of one family on our VXLAN device (none without the device). */
function neighbours(ns: string, family: '-4' | '-6'): string[] {
  const hasVxlan = execFileSync('ip', ['-n', ns, '-o', 'link', 'show'], { encoding: 'utf8' }).includes(
    ' wn-vxlan:',
  );
  return hasVxlan ? lines(ns, family, 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent') : [];
}

describeEtcdRoot(
  `fabric: dual-stack pods over an IPv4 underlay (real etcd, real kernel)${SKIP}`,
  function () {
    this.timeout(240_000);
    /**
     * Three daemons in `mode` on a fresh underlay and a fresh etcd (its keys under /dual-<mode>), each
     * with two dual-stack pods.
     */
    function cluster(mode: 'vxlan' | 'hybrid' | 'routed'): {
      nodes: Node[];
      node: (n: string) => Node;
      etcd: () => EtcdCluster;
    } {
      let c: FabricCluster | undefined;
      const nodes: Node[] = [];
      before(async () => {
        c = await FabricCluster.start({
          source: 'etcd',
          fabric: mode,
          flags: { 'etcd-prefix': `/dual-${mode}` },
          args: ['--cluster-cidr', CLUSTER6],
          nodes: usualNodes({ na: {}, nb: {}, nc: {} }),
          podsPerNode: 2,
        });
        for (const n of c.nodes)
          nodes.push(
            Object.assign(n, {
              dual: n.pods.map((p) => ({
                ns: p.ns,
                ip4: p.ips.find((a) => !a.includes(':')) ?? '',
                ip6: p.ips.find((a) => a.includes(':')) ?? '',
              })),
            }),
          );
        // Every node has seen both peers with both their blocks.
        for (const n of nodes)
          await waitUntil(
            async () => {
              const peers = (c as FabricCluster).peersOf(n);
              return peers.length === 2 && peers.every((p) => p.prefixes.length === 2);
            },
            `${n.name} sees both peers' IPv4 and IPv6 blocks`,
            30_000,
            { intervalMs: 200 },
          );
      });
      after(async () => {
        await c?.teardown();
      });
      return {
        nodes,
        node: (name) => nodes.find((n) => n.name === name) as Node,
        etcd: () => (c as FabricCluster).etcd as EtcdCluster,
      };
    }

    /**
     * A peer's IPv6 block as na's daemon shows it, and the neighbour key of its routes: the IPv6 tunnel
     * address the peer publishes in its record (an address of its own block, held on its wn-vxlan), or
     * the block's first address before it has published one (own-keys.ts). The peer reserves it once
     * its block is claimed and publishes its record again, so the key may move once after start.
     */
    function peerV6(
      etcd: EtcdCluster,
      from: Node,
      peer: string,
      mode: string,
    ): { block: string; gateway: () => string } {
      const block = peersOf(from.api)
        .find((p) => p.node === peer)
        ?.prefixes.find((p) => p.includes(':')) as string;
      const gateway = (): string => {
        const record = etcd.etcdctl('get', `/dual-${mode}/nodes/${peer}`, '--print-value-only').trim();
        const published = record
          ? (JSON.parse(record) as { vtep?: { gateways?: { 6?: string } } }).vtep?.gateways?.[6]
          : undefined;
        return published ?? (block.split('/')[0] as string);
      };
      return { block, gateway };
    }

    /** Waits until na's IPv6 routes are `expected()` (keys may move once after start), then asserts it. */
    /** Waits until na tunnels both peers' IPv6 blocks (vxlan, hybrid) beside the IPv6 catch-all. */
    async function tunnelledV6(
      c: ReturnType<typeof cluster>,
      mode: 'vxlan' | 'hybrid',
    ): Promise<{ na: Node; nb: ReturnType<typeof peerV6>; nc: ReturnType<typeof peerV6> }> {
      const na = c.node('na');
      const nb = peerV6(c.etcd(), na, 'nb', mode);
      const nc = peerV6(c.etcd(), na, 'nc', mode);
      await routesSettle(na.ns, () => [
        `${nb.block} via ${nb.gateway()} dev wn-vxlan metric 1024 onlink mtu 1450 pref medium`,
        `${nc.block} via ${nc.gateway()} dev wn-vxlan metric 1024 onlink mtu 1450 pref medium`,
        `unreachable ${CLUSTER6} dev lo metric 4294967295 pref medium`,
      ]);
      return { na, nb, nc };
    }

    async function routesSettle(ns: string, expected: () => string[]): Promise<void> {
      await waitUntil(
        async () => JSON.stringify(routes6(ns)) === JSON.stringify(expected().sort()),
        'IPv6 routes keyed on what the peers publish',
        // Each key moves once after start (a reservation, a record, a peer's apply): seconds apart on
        // a loaded machine.
        60_000,
        { intervalMs: 200 },
      );
      expect(routes6(ns)).to.deep.equal(expected().sort());
    }

    /** Every pod pings every pod of another node over IPv6. */
    async function everyPodReachesEveryPod(nodes: Node[]): Promise<void> {
      const pods = nodes.flatMap((n) => n.dual.map((p) => ({ node: n.name, ...p })));
      const failed: string[] = [];
      await Promise.all(
        pods.flatMap((from) =>
          pods
            .filter((to) => to.node !== from.node)
            .map(async (to) => {
              const ok = await pings(from.ns, to.ip6, { count: 3, waitSeconds: 2, intervalSeconds: 0.2 });
              if (!ok) failed.push(`${from.ns} → ${to.ns} (${to.ip6})`);
            }),
        ),
      );
      expect(failed, 'IPv6 pairs that did not answer').to.deep.equal([]);
    }

    describe('vxlan', () => {
      const MODE = 'vxlan';
      const c = cluster(MODE);

      it('programs per peer one IPv6 route per remote block, one neighbour per family and one FDB entry, and the IPv6 catch-all', async () => {
        const { na, nb, nc } = await tunnelledV6(c, MODE);
        expect(neighbours(na.ns, '-6')).to.deep.equal(
          [`${nb.gateway()} lladdr ${NB_MAC} PERMANENT`, `${nc.gateway()} lladdr ${NC_MAC} PERMANENT`].sort(),
        );
        expect(neighbours(na.ns, '-4')).to.have.length(2);
        expect(
          (await bridge(na.ns, 'fdb', 'show', 'dev', 'wn-vxlan')).trim().split('\n').sort(),
        ).to.deep.equal([
          `${NB_MAC} dst 10.100.1.2 self permanent`,
          `${NC_MAC} dst 10.100.2.3 self permanent`,
        ]);
      });

      it('carries IPv6 from every pod to every pod of the other nodes', async () => {
        await everyPodReachesEveryPod(c.nodes);
      });
    });

    describe('hybrid', () => {
      const MODE = 'hybrid';
      const c = cluster(MODE);

      it('tunnels IPv6 to every peer — the one on the same subnet too, whose IPv4 goes direct', async () => {
        const { na } = await tunnelledV6(c, MODE);
        // nb's IPv4 block goes direct: an IPv4 neighbour only for nc; IPv6 neighbours and FDB entries
        // for both.
        expect(neighbours(na.ns, '-6')).to.have.length(2);
        expect(neighbours(na.ns, '-4')).to.have.length(1);
        expect(neighbours(na.ns, '-4')[0]).to.include(`lladdr ${NC_MAC}`);
        expect(
          (await bridge(na.ns, 'fdb', 'show', 'dev', 'wn-vxlan')).trim().split('\n').sort(),
        ).to.deep.equal([
          `${NB_MAC} dst 10.100.1.2 self permanent`,
          `${NC_MAC} dst 10.100.2.3 self permanent`,
        ]);
        const nbIpv4 = lines(na.ns, '-4', 'route', 'show', 'proto', '119').filter((r) =>
          r.includes('dev eth0'),
        );
        expect(nbIpv4, "nb's IPv4 block direct on the uplink").to.have.length(1);
        expect(nbIpv4[0]).to.include('via 10.100.1.2 dev eth0');
        const peers = peersOf(na.api);
        expect(peers.find((p) => p.node === 'nb')?.path).to.equal('direct');
        expect(peers.find((p) => p.node === 'nc')?.path).to.equal('vxlan');
      });

      it('carries IPv6 from every pod to every pod of the other nodes', async () => {
        await everyPodReachesEveryPod(c.nodes);
      });
    });

    describe('routed', () => {
      const c = cluster('routed');

      it('reports the IPv6 blocks not routed directly; their packets hit the catch-all and fail at once', async () => {
        const na = c.node('na');
        const nb = peerV6(c.etcd(), na, 'nb', 'routed');
        await waitUntil(
          async () => routes6(na.ns).length === 1 && peersOf(na.api).length === 2,
          'na programmed its table',
          30_000,
          { intervalMs: 200 },
        );
        expect(routes6(na.ns)).to.deep.equal([
          `unreachable ${CLUSTER6} dev lo metric 4294967295 pref medium`,
        ]);
        expect(neighbours(na.ns, '-6')).to.deep.equal([]);
        const peers = peersOf(na.api) as Array<{
          node: string;
          path: string;
          reason?: string;
        }>;
        const onSubnet = peers.find((p) => p.node === 'nb');
        expect(onSubnet?.path).to.equal('direct');
        expect(onSubnet?.reason).to.equal(
          `not routed directly (another family than the underlay): ${nb.block}`,
        );
        expect(peers.find((p) => p.node === 'nc')?.path).to.equal('unreachable');
        // IPv4 to the peer on the subnet works; IPv6 to it is refused by the catch-all, not lost.
        const from = na.dual[0] as Pod;
        const to = c.node('nb').dual[0] as Pod;
        expect(await pings(from.ns, to.ip4, { count: 2, waitSeconds: 2 })).to.equal(true);
        const six = await pingOutput(from.ns, to.ip6, 5);
        expect(six.ok).to.equal(false);
        expect(six.out).to.match(/unreachable/i);
        expect(six.ms, 'refused at once, not a timeout').to.be.below(4000);
      });
    });
  },
);
