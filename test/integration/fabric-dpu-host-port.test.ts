import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { FabricHostPort, StatusResponse } from '../../proto/gen/workloadnet/v1/workload';
import { FabricTopology, type BareNode } from '../support/fabric-topology';
import { SimProcess } from '../support/sim-process';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../support/etcd-cluster';

// The host port end to end: with the DPUs carrying the fabric, the daemon attaches the node's own
// namespace to the network on its DPUs (wn-host0), and the host reaches every pod through it: a pod
// behind its own DPU, one behind a DPU of another node, one on a Linux-backend node. da and db run the
// DPU backend with one simulated DPU each (workloadnet-dpu-sim in netns mode); nl runs the Linux backend.

const CLUSTER = '10.244.0.0/16';
const HOST_PORT = 'workloadnet-host-port';
const CLI = path.resolve(__dirname, '../../cli/workloadnet.js');

interface Dpu extends BareNode {
  stateFile: string;
  sim?: SimProcess;
}

interface Node extends BareNode {
  dir: string;
  args: string[];
  dpus: Dpu[];
  daemon?: DaemonProcess;
}

interface Pod {
  name: string;
  ns: string;
  ip: string;
}

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(
  `the host port: the node's namespace reaches the overlay through its DPU${SKIP}`,
  function () {
    this.timeout(240_000);
    const topo = new FabricTopology();
    const nodes: Node[] = [];
    const pods = new Map<string, Pod>();
    let root: string;
    let etcd: EtcdCluster;

    const node = (name: string): Node => nodes.find((n) => n.name === name) as Node;
    const pod = (name: string): Pod => pods.get(name) as Pod;
    const status = (n: Node): Promise<StatusResponse> => n.daemon!.client.status();
    const hostPortOf = async (n: Node): Promise<FabricHostPort | undefined> =>
      (await status(n)).fabric?.hostPort;

    function startSim(n: Node, d: Dpu): SimProcess {
      d.sim = SimProcess.start({
        socket: path.join(n.dir, 'agent.sock'),
        agentId: d.name,
        bootId: `boot-${d.name}`,
        stateFile: d.stateFile,
        extra: ['--dataplane', 'netns', '--dpu-netns', d.ns, '--host-netns', `/var/run/netns/${n.ns}`],
      });
      return d.sim;
    }

    async function startDaemon(n: Node): Promise<void> {
      n.daemon = await DaemonProcess.start({ dir: n.dir, netns: etcd.netns, args: n.args });
    }

    async function attach(n: Node, name: string): Promise<Pod> {
      const ns = topo.pool.add(name);
      const p: Pod = { name, ns: ns.name, ip: '' };
      await waitUntil(
        async () =>
          n
            .daemon!.client.call(n.daemon!.client.raw.attach, attachRequest(name, ns.path, 'eth0'))
            .then((res) => {
              p.ip = (res.ips[0]?.cidr ?? '').split('/')[0] ?? '';
              return true;
            }),
        `${name} attached on ${n.name}`,
        30_000,
        { intervalMs: 200, retryOnError: true },
      );
      pods.set(name, p);
      return p;
    }

    /** `ip -n ns route get ip`: the device the host's route to it goes out of. */
    function routeDevice(ns: string, ip: string): string {
      const out = execFileSync('ip', ['-n', ns, '-j', 'route', 'get', ip], { encoding: 'utf8' });
      return (JSON.parse(out) as Array<{ dev?: string }>)[0]?.dev ?? '';
    }

    function hostLink(ns: string): { ifindex: number; address: string } | undefined {
      try {
        const out = execFileSync('ip', ['-n', ns, '-j', 'addr', 'show', 'dev', 'wn-host0'], {
          encoding: 'utf8',
        });
        const link = (JSON.parse(out) as Array<{ ifindex: number; addr_info: Array<{ local: string }> }>)[0];
        return link ? { ifindex: link.ifindex, address: link.addr_info[0]?.local ?? '' } : undefined;
      } catch {
        return undefined;
      }
    }

    /** The host port's port as the node's simulated DPU holds it. */
    const simPort = (d: Dpu): { name: string; generation: number } | undefined =>
      d.sim?.state()?.ports.find((p) => p.name === `${HOST_PORT}/wn-host0`);

    before(async () => {
      root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-hostport-'));
      etcd = await EtcdCluster.start(path.join(root, 'etcd'), 3, 'wn-hostport-');
      await topo.build([]);
      const config = path.join(root, 'config.json');
      fs.writeFileSync(config, JSON.stringify({ fabric: { leaseTtlSeconds: 2, withdrawGraceSeconds: 10 } }));
      const layout = [
        { name: 'ha', subnet: 1, host: 1, dpus: [['ha-d0', 11]] },
        { name: 'hb', subnet: 2, host: 2, dpus: [['hb-d0', 21]] },
        { name: 'hl', subnet: 1, host: 3, dpus: [] },
      ] as const;
      for (const l of layout) {
        const bare = await topo.addBareNode({ name: l.name, subnet: l.subnet, host: l.host });
        const dir = path.join(root, l.name);
        fs.mkdirSync(dir, { recursive: true });
        const dpus: Dpu[] = [];
        for (const [id, host] of l.dpus) {
          const d = await topo.addBareNode({ name: id, subnet: l.subnet, host });
          dpus.push({ ...d, stateFile: path.join(dir, `${id}.json`) });
        }
        const args = [
          ...['--config', config, '--pool-source', 'etcd', '--node-name', l.name],
          ...['--etcd-endpoints', etcd.endpoints.join(','), '--cluster-cidr', CLUSTER],
          ...['--host-netns', `/var/run/netns/${bare.ns}`, '--fabric', 'vxlan', '--mtu', '1450'],
          ...(dpus.length ? ['--backend', 'dpu', '--agent-socket', path.join(dir, 'agent.sock')] : []),
        ];
        const n: Node = { ...bare, dir, args, dpus };
        await startDaemon(n);
        nodes.push(n);
        for (const d of dpus)
          await startSim(n, d).waitForState((s) => s.session.state === 'connected' && s.synced, 'connected');
      }
      await attach(node('ha'), 'pa');
      await attach(node('hb'), 'pb');
      await attach(node('hl'), 'pl');
      for (const n of nodes)
        await waitUntil(
          async () => (await status(n)).fabric?.ready === true,
          `${n.name}'s fabric ready`,
          60_000,
          {
            intervalMs: 200,
          },
        );
      for (const n of [node('ha'), node('hb')])
        await waitUntil(
          async () => (await hostPortOf(n))?.state === 'attached',
          `${n.name}'s host port attached`,
          60_000,
          { intervalMs: 200 },
        );
    });

    after(async () => {
      for (const n of nodes) for (const d of n.dpus) await d.sim?.stop('SIGKILL');
      for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
      topo.cleanup();
      await etcd?.stop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    it('attaches the host namespace to its DPU as wn-host0, without a default route, routing the cluster range', async () => {
      const ha = node('ha');
      const hp = await hostPortOf(ha);
      expect(hp).to.include({ state: 'attached', interface: 'wn-host0', dpu: 'ha-d0', reason: '' });
      expect(hp?.routes).to.deep.equal([CLUSTER]);
      const st = await status(ha);
      const slices = st.fabric?.endpoints.find((e) => e.id === 'ha-d0')?.prefixes ?? [];
      expect(slices.length).to.be.greaterThan(0);
      const link = hostLink(ha.ns);
      expect(link?.address).to.equal(hp?.addresses[0]);
      // Its address comes from its DPU's slices like any pod's, so other nodes route it to that DPU.
      expect(
        slices.some((s) => within(link!.address, s)),
        `${link?.address} in ${slices.join(',')}`,
      ).to.equal(true);
      const routes = execFileSync('ip', ['-n', ha.ns, 'route', 'show', 'default'], { encoding: 'utf8' });
      expect(routes, "the host's default route is left alone").to.not.include('wn-host0');
      const attachments = (await ha.daemon!.client.call(ha.daemon!.client.raw.list, {})).attachments;
      expect(attachments.find((a) => a.workloadId === HOST_PORT)).to.include({
        ifName: 'wn-host0',
        netnsPath: `/var/run/netns/${ha.ns}`,
      });
    });

    it("reaches a local pod, a pod behind another node's DPU and a Linux node's pod, all through wn-host0", async () => {
      for (const [n, targets] of [
        [node('ha'), ['pa', 'pb', 'pl']],
        [node('hb'), ['pb', 'pa', 'pl']],
      ] as const) {
        for (const t of targets) {
          expect(routeDevice(n.ns, pod(t).ip), `${n.name} → ${t} (${pod(t).ip}) goes out of`).to.equal(
            'wn-host0',
          );
          expect(await pings(n.ns, pod(t).ip, { count: 3, waitSeconds: 2 }), `${n.name} → ${t}`).to.equal(
            true,
          );
        }
      }
    });

    it("the node's simulated DPU holds the host port as one of its ports", async () => {
      const d = node('ha').dpus[0]!;
      const port = simPort(d);
      expect(port, 'the host port on ha-d0').to.not.equal(undefined);
      const hp = await hostPortOf(node('ha'));
      expect((port as unknown as { ips: string[] }).ips).to.deep.equal([`${hp?.addresses[0]}/32`]);
    });

    it('refuses an Attach of its workload id, and neither a GC nor a forced sweep takes it', async () => {
      const ha = node('ha');
      const c = ha.daemon!.client;
      const before = hostLink(ha.ns);
      const ns = topo.pool.add('impostor');
      let refused = '';
      await c
        .call(c.raw.attach, attachRequest(HOST_PORT, ns.path, 'eth1'))
        .catch((err: Error) => (refused = err.message));
      expect(refused).to.include("the daemon's own host port");
      // A keep list that names only pa, as a runtime's GC would; then the sweep twice, forced.
      const gc = await c.call(c.raw.gc, {
        keep: [{ workloadId: 'pa', ifName: '' }],
        namespacesGone: false,
        dryRun: false,
      });
      expect(gc.removed.map((r) => r.workloadId)).to.not.include(HOST_PORT);
      for (let i = 0; i < 2; i++) {
        const swept = await c.call(c.raw.gc, { keep: [], namespacesGone: true, dryRun: false });
        expect([...swept.removed, ...swept.suspected].map((r) => r.workloadId)).to.not.include(HOST_PORT);
      }
      const cli = JSON.parse(
        execFileSync(
          process.execPath,
          [CLI, 'gc', '--namespaces-gone', '--json', '--socket', ha.daemon!.socket],
          {
            encoding: 'utf8',
          },
        ),
      ) as { removed: string[] };
      expect(cli.removed).to.not.include(HOST_PORT);
      expect(hostLink(ha.ns)).to.deep.equal(before);
      expect((await hostPortOf(ha))?.state).to.equal('attached');
      expect(await pings(ha.ns, pod('pb').ip, { count: 2, waitSeconds: 2 })).to.equal(true);
    });

    it('a daemon restart keeps the host port as it is: same interface, same address, no new attach', async () => {
      const ha = node('ha');
      const d = ha.dpus[0]!;
      const link = hostLink(ha.ns);
      const port = simPort(d);
      const hp = await hostPortOf(ha);
      const logFile = path.join(ha.dir, 'daemon.log');
      const attachedLines = (): number =>
        fs.readFileSync(logFile, 'utf8').split('host port attached').length - 1;
      const attachedBefore = attachedLines();
      expect(attachedBefore, 'the first start attached it').to.equal(1);
      await ha.daemon!.stop();
      // Down with the daemon, the host still reaches the pods: the DPU keeps its dataplane.
      expect(
        await pings(ha.ns, pod('pb').ip, { count: 2, waitSeconds: 2 }),
        'while the daemon is down',
      ).to.equal(true);
      await startDaemon(ha);
      await waitUntil(
        async () => (await hostPortOf(ha))?.state === 'attached',
        'host port seen again',
        30_000,
        {
          intervalMs: 200,
          retryOnError: true,
        },
      );
      await d.sim!.waitForState((s) => s.session.state === 'connected' && s.synced, 'reconnected');
      // A few of the controller's passes, so that a re-attach, if there were one, would have happened.
      await waitUntil(async () => (await status(ha)).ready, 'ha ready', 30_000, { intervalMs: 200 });
      await new Promise((r) => setTimeout(r, 4500));
      expect(hostLink(ha.ns)).to.deep.equal(link);
      expect((await hostPortOf(ha))?.addresses).to.deep.equal(hp?.addresses);
      expect(simPort(d)?.generation, 'the port was not programmed again').to.equal(port?.generation);
      expect(attachedLines(), 'no attach since the restart').to.equal(attachedBefore);
      expect(routeDevice(ha.ns, pod('pl').ip)).to.equal('wn-host0');
      expect(await pings(ha.ns, pod('pl').ip, { count: 2, waitSeconds: 2 })).to.equal(true);
    });
  },
);

/** Whether an IPv4 address lies in a CIDR (test arithmetic). */
function within(ip: string, cidr: string): boolean {
  const [net = '', len = '32'] = cidr.split('/');
  const n = (a: string): number => a.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const size = 2 ** (32 - Number(len));
  return Math.floor(n(ip) / size) === Math.floor(n(net) / size);
}
