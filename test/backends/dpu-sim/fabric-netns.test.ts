import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { AckCode, type FabricObject, type Port } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { describeRoot } from '../../support/describe-root';
import { netnsPath } from '../../support/netns';
import { pings } from '../../support/ping';
import { waitUntil } from '../../support/wait-until';
import { FabricTopology, kernelState, settings, type BareNode } from '../../support/fabric-topology';
import { removeDir, scratchDir } from '../../support/dpu-fixtures';
import { SimProcess } from '../../support/sim-process';
import { PORT, VNI, localPrefix, peer, route, vtep, vtepMac } from './fabric-objects';
import { ScriptedDaemon, type Session } from './scripted-daemon';

// The simulator's fabric with real packets. The fabric tests' underlay (two subnets joined by a router)
// carries three "nodes": a node on the Linux backend with a pod behind its own wn-vxlan (LinuxFabric),
// and two DPU namespaces, each run by a simulator in netns mode with one port whose VF end the test
// moves from the DPU's host namespace into a pod. A scripted daemon sends each simulator its port and
// its fabric; pods behind the DPUs then reach each other and the Linux node's pod over VXLAN.

const ip = (...args: string[]): string => execFileSync('ip', args, { encoding: 'utf8' });

interface LinkStats {
  ifindex: number;
  stats64: { rx: { packets: number }; tx: { packets: number } };
}

function vxlanStats(ns: string): LinkStats {
  const [l] = JSON.parse(ip('-n', ns, '-j', '-s', 'link', 'show', 'wn-vxlan')) as LinkStats[];
  if (!l) throw new Error(`no wn-vxlan in ${ns}`);
  return l;
}

const ping = (from: string, to: string): Promise<boolean> =>
  pings(from, to, { count: 3, intervalSeconds: 0.2, waitSeconds: 2 });

interface Dpu {
  node: BareNode;
  port: Port;
  host: string;
  pod: string;
  podIp: string;
  prefix: string;
  sim: SimProcess;
  session: Session;
  daemon: ScriptedDaemon;
}

describeRoot('DPU simulator: the fabric over VXLAN in netns mode (needs root)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  let dir: string;
  let linux: LinuxFabric | undefined;
  const dpus: Dpu[] = [];

  async function startSim(d: Pick<Dpu, 'node' | 'host' | 'daemon'>, name: string): Promise<SimProcess> {
    return SimProcess.start({
      socket: d.daemon.socket,
      agentId: name,
      bootId: `boot-${name}`,
      stateFile: path.join(dir, `${name}.json`),
      extra: ['--dataplane', 'netns', '--dpu-netns', d.node.ns, '--host-netns', netnsPath(d.host)],
    });
  }

  /** A DPU namespace on the underlay, its host namespace, a simulator and a pod behind one port. */
  async function addDpu(name: string, subnet: 1 | 2, host: number, podRange: number): Promise<Dpu> {
    const node = await topo.addBareNode({ name, subnet, host });
    const hostNs = topo.pool.add(`${name}host`).name;
    const pod = topo.pool.add(`${name}pod`).name;
    // A slow heartbeat: set-up with ip(8) holds this process's event loop now and then.
    const daemon = await ScriptedDaemon.start(path.join(dir, `${name}.sock`), { heartbeatIntervalMs: 2000 });
    const sim = await startSim({ node, host: hostNs, daemon }, name);
    const session = await daemon.session();
    const podIp = `10.244.${podRange}.5`;
    const port: Port = {
      name: `${name}-pod/eth0`,
      generation: daemon.nextGeneration(),
      mac: `02:00:00:00:${podRange.toString(16).padStart(2, '0')}:05`,
      ips: [`${podIp}/32`],
      routes: [{ destination: '0.0.0.0/0', gateway: '169.254.1.1' }],
      mtu: 1450,
      vlan: 0,
      vni: 0,
      workloadId: `${name}-pod`,
      ifName: 'eth0',
    };
    daemon.upsertPort(session, port);
    const ack = await daemon.ackOf(session, port.name, port.generation);
    expect(ack.code, ack.message).to.equal(AckCode.ACK_CODE_OK);
    const vf = ack.endpoint!.netdev;
    // What the daemon's host side does with the VF, by hand.
    ip('-n', hostNs, 'link', 'set', vf, 'netns', pod);
    ip('-n', pod, 'link', 'set', vf, 'name', 'eth0');
    ip('-n', pod, 'link', 'set', 'lo', 'up');
    ip('-n', pod, 'link', 'set', 'eth0', 'up');
    ip('-n', pod, 'addr', 'add', `${podIp}/32`, 'dev', 'eth0');
    ip('-n', pod, 'route', 'add', '169.254.1.1', 'dev', 'eth0', 'scope', 'link');
    ip('-n', pod, 'route', 'add', 'default', 'via', '169.254.1.1', 'dev', 'eth0');
    return { node, port, host: hostNs, pod, podIp, prefix: `10.244.${podRange}.0/24`, sim, session, daemon };
  }

  /** What the daemon would send a DPU: its VTEP and prefix, and every other endpoint with its prefix. */
  function fabricFor(
    d: Dpu,
    others: Array<{ name: string; address: string; prefix: string }>,
  ): FabricObject[] {
    const g = (): number => d.daemon.nextGeneration();
    return [
      vtep(g(), d.node.address),
      localPrefix(g(), d.prefix),
      ...others.flatMap((o) => [peer(g(), o.name, o.address), route(g(), o.prefix, `peer/${o.name}`)]),
    ];
  }

  before(async () => {
    dir = scratchDir();
    // The Linux-backend node: pod 10.244.3.5 behind its own wn-vxlan.
    await topo.build([{ name: 'nl', subnet: 1, host: 10, podRange: 3 }]);
    dpus.push(await addDpu('da', 1, 21, 1));
    dpus.push(await addDpu('db', 2, 22, 2));
  });

  after(async () => {
    for (const d of dpus) {
      await d.sim.stop('SIGKILL');
      await d.daemon.stop();
    }
    await linux?.stop();
    await topo.cleanup();
    removeDir(dir);
  });

  it('states the default-route interface as its uplink, and programs wn-vxlan, FDB, neighbours and routes', async () => {
    const [da, db] = dpus as [Dpu, Dpu];
    const nl = topo.node('nl');
    expect(da.session.hello.uplinkAddresses).to.deep.equal([da.node.address]);
    expect(da.session.hello.uplinkMtu).to.equal(1500);
    expect(da.session.hello.capabilities?.features).to.include('fabric-vxlan');

    const nodes = [
      { name: 'da', address: da.node.address, prefix: da.prefix },
      { name: 'db', address: db.node.address, prefix: db.prefix },
      { name: 'nl', address: nl.address, prefix: nl.prefix },
    ];
    for (const d of [da, db]) {
      const objects = fabricFor(
        d,
        nodes.filter((n) => n.address !== d.node.address),
      );
      // Every snapshot lists the port too: the simulator deletes a port a complete snapshot omits.
      d.daemon.snapshot(d.session, objects, { ports: [d.port] });
      const acks = await d.daemon.allAcked(d.session, objects);
      for (const a of acks) expect(a.code, `${a.name}: ${a.message}`).to.equal(AckCode.ACK_CODE_OK);
    }
    // The Linux node takes both DPUs as peers, as its daemon would from the peer table.
    linux = new LinuxFabric({ hostNetnsPath: netnsPath(nl.ns), monitor: false });
    await linux.prepare(settings('vxlan'));
    const report = await linux.apply(
      [da, db].map((d) => ({
        node: d.node.name,
        underlay: [d.node.address],
        mtu: 1500,
        vtep: { mac: vtepMac(d.node.address), vni: VNI, port: PORT },
        bootId: '',
        prefixes: [d.prefix],
      })),
    );
    expect(report.reasons).to.deep.equal([]);

    const [dev] = JSON.parse(ip('-n', da.node.ns, '-j', '-d', 'link', 'show', 'wn-vxlan')) as Array<{
      address: string;
      mtu: number;
      flags: string[];
      linkinfo: {
        info_kind: string;
        info_data: { id: number; port: number; local: string; learning?: boolean };
      };
    }>;
    expect(dev?.address).to.equal(vtepMac(da.node.address));
    expect(dev?.mtu).to.equal(1450);
    expect(dev?.flags).to.include('UP');
    expect(dev?.linkinfo.info_kind).to.equal('vxlan');
    expect(dev?.linkinfo.info_data).to.include({ id: VNI, port: PORT, local: da.node.address });
    expect(dev?.linkinfo.info_data.learning ?? false).to.equal(false);
    const sysctl = (key: string): string =>
      execFileSync('ip', ['netns', 'exec', da.node.ns, 'sysctl', '-n', key], { encoding: 'utf8' }).trim();
    expect(sysctl('net.ipv4.conf.wn-vxlan.rp_filter'), 'loose reverse-path filter').to.equal('2');
    expect(sysctl('net.ipv4.conf.wn-vxlan.forwarding')).to.equal('1');
    const k = await kernelState(da.node.ns);
    // Flannel's scheme, as the Linux node programs it: the prefix via its network address, onlink.
    expect(k.routes).to.have.members([
      `${db.prefix} via 10.244.2.0 dev wn-vxlan metric 1024 onlink mtu 1450`,
      `${nl.prefix} via 10.244.3.0 dev wn-vxlan metric 1024 onlink mtu 1450`,
      `unreachable ${da.prefix} metric 4294967295`,
    ]);
    expect(k.neigh).to.have.members([
      `10.244.2.0 lladdr ${vtepMac(db.node.address)} PERMANENT`,
      `10.244.3.0 lladdr ${vtepMac(nl.address)} PERMANENT`,
    ]);
    expect(k.fdb).to.have.members([
      `${vtepMac(db.node.address)} dst ${db.node.address} self permanent`,
      `${vtepMac(nl.address)} dst ${nl.address} self permanent`,
    ]);
  });

  it('carries pod traffic between the two DPUs and to a pod of the Linux node over wn-vxlan', async () => {
    const [da, db] = dpus as [Dpu, Dpu];
    const nl = topo.node('nl');
    const before = [vxlanStats(da.node.ns), vxlanStats(db.node.ns)];
    expect(await ping(da.pod, db.podIp), 'pod behind da → pod behind db').to.equal(true);
    const mid = [vxlanStats(da.node.ns), vxlanStats(db.node.ns)];
    expect(
      mid[0]!.stats64.tx.packets - before[0]!.stats64.tx.packets,
      'da sent over wn-vxlan',
    ).to.be.at.least(3);
    expect(
      mid[1]!.stats64.rx.packets - before[1]!.stats64.rx.packets,
      'db received over wn-vxlan',
    ).to.be.at.least(3);
    expect(await ping(da.pod, nl.podIp), 'pod behind da → pod of the Linux node').to.equal(true);
    expect(await ping(nl.pod, db.podIp), 'pod of the Linux node → pod behind db').to.equal(true);
    const after = vxlanStats(db.node.ns);
    expect(after.stats64.tx.packets - mid[1]!.stats64.tx.packets, 'db answered over wn-vxlan').to.be.at.least(
      3,
    );

    // Every peer is reported: programmed and reachable, never offloaded (a software path).
    await waitUntil(
      () => (da.session.peerStatus.at(-1)?.peers ?? []).filter((p) => p.reachable).length === 2,
      `da reports both peers reachable (${JSON.stringify(da.session.peerStatus.at(-1))})`,
    );
    expect(da.session.peerStatus.at(-1)!.peers.every((p) => !p.offloaded)).to.equal(true);
  });

  it('a restart of the same boot adopts wn-vxlan as it is and traffic keeps flowing', async () => {
    const [da, db] = dpus as [Dpu, Dpu];
    const ifindex = vxlanStats(da.node.ns).ifindex;
    await da.sim.stop('SIGKILL');
    // Nobody runs the DPU now: its kernel keeps carrying packets.
    expect(await ping(da.pod, db.podIp), 'while the agent is down').to.equal(true);
    da.sim = await startSim(da, 'da');
    da.session = await da.daemon.session();
    await da.sim.waitForState((x) => x.session.state === 'connected', 'reconnected');
    expect(vxlanStats(da.node.ns).ifindex, 'the same device').to.equal(ifindex);
    expect(await ping(da.pod, db.podIp), 'after the restart').to.equal(true);
  });

  it('removes only objects of its own: a route the daemon deletes, strays of ours after a complete snapshot, never a foreign route', async () => {
    const [da, db] = dpus as [Dpu, Dpu];
    const nl = topo.node('nl');
    ip('-n', da.node.ns, 'route', 'add', '10.244.9.0/24', 'via', '10.100.1.254', 'proto', 'static');
    ip('-n', da.node.ns, 'route', 'add', '10.244.8.0/24', 'via', '10.100.1.254', 'proto', '119');
    const g = da.daemon.delete(da.session, `route/${db.prefix}`);
    expect((await da.daemon.ackOf(da.session, `route/${db.prefix}`, g)).code).to.equal(AckCode.ACK_CODE_OK);
    expect(await ping(da.pod, db.podIp), 'no route to db any more').to.equal(false);
    expect(await ping(da.pod, nl.podIp), 'nl still reached').to.equal(true);
    let k = await kernelState(da.node.ns);
    expect(k.routes.join('\n')).to.not.include(db.prefix);
    expect(k.neigh.join('\n')).to.not.include('10.244.2.0');

    // The snapshot after the restart lists everything again, without peer db: the stray of our
    // protocol goes, db's FDB entry goes, the foreign route stays.
    const objects = fabricFor(da, [{ name: 'nl', address: nl.address, prefix: nl.prefix }]);
    da.daemon.snapshot(da.session, objects, { ports: [da.port] });
    await da.daemon.allAcked(da.session, objects);
    await da.sim.waitForState(
      (x) => x.synced && !(x.fabric ?? []).some((o) => o.name === 'peer/db'),
      'db gone',
    );
    await waitUntil(
      async () => !(await kernelState(da.node.ns)).routes.some((r) => r.startsWith('10.244.8.0')),
      'the stray pruned',
    );
    k = await kernelState(da.node.ns);
    expect(k.fdb.join('\n')).to.not.include(db.node.address);
    expect(ip('-n', da.node.ns, 'route', 'show', '10.244.9.0/24')).to.include('proto static');
    expect(await ping(da.pod, nl.podIp), 'nl still reached').to.equal(true);
  });
  it('converges a burst of objects together: an object whose request fails is acked with its own error, every other one OK and in the kernel', async () => {
    const [, db] = dpus as [Dpu, Dpu];
    // A foreign route where one of the burst's routes must go: our exclusive create fails (EEXIST),
    // in the middle of a batch of some hundred other requests.
    const taken = '10.245.200.0/24';
    ip('-n', db.node.ns, 'route', 'add', 'blackhole', taken, 'metric', '1024', 'proto', 'static');
    const g = (): number => db.daemon.nextGeneration();
    const count = 60;
    const peers = Array.from({ length: count }, (_, i) => ({ name: `bt${i}`, address: `10.100.9.${i + 1}` }));
    const objects: FabricObject[] = peers.flatMap((p, i) => [
      peer(g(), p.name, p.address),
      route(g(), `10.245.${i}.0/24`, `peer/${p.name}`),
    ]);
    const bad = route(g(), taken, 'peer/bt0');
    objects.splice(count, 0, bad);
    for (const o of objects) db.daemon.upsert(db.session, o);
    const acks = await db.daemon.allAcked(db.session, objects, 60_000);

    const failed = acks.filter((a) => a.code !== AckCode.ACK_CODE_OK);
    expect(failed.map((a) => a.name)).to.deep.equal([bad.name]);
    expect(failed[0]!.code).to.equal(AckCode.ACK_CODE_INTERNAL);
    expect(failed[0]!.retryable).to.equal(true);
    expect(failed[0]!.message).to.match(
      new RegExp(
        `route ${taken.replace(/\./g, '\\.')} via 10\\.245\\.200\\.0 metric 1024: .*EEXIST.*a route that is not ours holds it; left alone`,
      ),
    );
    // It shared a batch with others: the simulator logs each batch and the objects of it that failed.
    // The log line comes over stderr, the acks over the stream: it may arrive after them.
    const batchWithBad = (): { objects: number; notOk?: string[] } | undefined =>
      db.sim.stderr
        .split('\n')
        .filter((l) => l.includes('"msg":"fabric objects applied"'))
        .map((l) => JSON.parse(l) as { objects: number; notOk?: string[] })
        .find((b) => b.notOk?.includes(bad.name));
    await waitUntil(async () => batchWithBad() !== undefined, 'a batch holding the failing route logged');
    const withBad = batchWithBad();
    expect(withBad!.objects, 'objects converged with the failing route').to.be.greaterThan(1);
    expect(withBad!.notOk).to.deep.equal([bad.name]);

    const k = await kernelState(db.node.ns);
    for (const [i, p] of peers.entries()) {
      expect(k.fdb, p.name).to.include(`${vtepMac(p.address)} dst ${p.address} self permanent`);
      expect(k.neigh, p.name).to.include(`10.245.${i}.0 lladdr ${vtepMac(p.address)} PERMANENT`);
      expect(k.routes, p.name).to.include(
        `10.245.${i}.0/24 via 10.245.${i}.0 dev wn-vxlan metric 1024 onlink mtu 1450`,
      );
    }
    expect(k.routes.join('\n')).to.not.include(taken);
    expect(ip('-n', db.node.ns, 'route', 'show', taken))
      .to.include('blackhole')
      .and.include('proto static');

    // PeerStatus after the burst, from what was programmed: the new peers are reachable.
    const latest = (name: string) => db.session.peerStatus.at(-1)?.peers.find((p) => p.name === name);
    await waitUntil(
      () => peers.every((p) => latest(`peer/${p.name}`)?.reachable === true),
      "the burst's peers reported reachable",
    );
    // An FDB entry that goes behind our back shows by the next heartbeat's read of the kernel.
    const gone = peers[7]!;
    execFileSync('bridge', [
      '-n',
      db.node.ns,
      'fdb',
      'del',
      vtepMac(gone.address),
      'dev',
      'wn-vxlan',
      'dst',
      gone.address,
    ]);
    await waitUntil(
      () => latest(`peer/${gone.name}`)?.reachable === false,
      `peer/${gone.name} reported unreachable once its FDB entry is gone`,
      15_000,
    );
    expect(latest(`peer/${gone.name}`)!.lastError).to.match(/its FDB entry .* is not on wn-vxlan/);
    expect(latest(`peer/${peers[8]!.name}`)?.reachable).to.equal(true);
  });

  it("programs an object held back by another's FDB entry the moment that one lets go of it, and acks it again", async () => {
    const [da] = dpus as [Dpu, Dpu];
    const nl = topo.node('nl');
    const g = (): number => da.daemon.nextGeneration();
    // nl's entry goes, then a shadow stating nl's address (so its MAC) and nl itself come in one batch,
    // the shadow first: it takes the FDB entry, and nl is refused for it.
    const d = da.daemon.delete(da.session, 'peer/nl');
    expect((await da.daemon.ackOf(da.session, 'peer/nl', d)).code).to.equal(AckCode.ACK_CODE_OK);
    const shadow = peer(g(), 'aa-shadow', nl.address);
    const toNl = peer(g(), 'nl', nl.address);
    for (const o of [shadow, toNl]) da.daemon.upsert(da.session, o);
    const [, refused] = await da.daemon.allAcked(da.session, [shadow, toNl]);
    expect(refused!.code).to.equal(AckCode.ACK_CODE_INVALID);
    expect(refused!.message).to.match(/already programmed for peer\/aa-shadow/);

    // The shadow moves to another address: nl's entry is programmed at once, and acked OK at its generation.
    const moved = peer(g(), 'aa-shadow', '10.100.1.99');
    da.daemon.upsert(da.session, moved);
    expect((await da.daemon.ackOf(da.session, moved.name, moved.generation)).code).to.equal(
      AckCode.ACK_CODE_OK,
    );
    await waitUntil(
      () =>
        da.session.acks.some(
          (a) => a.name === 'peer/nl' && a.generation === toNl.generation && a.code === AckCode.ACK_CODE_OK,
        ),
      'peer/nl acked OK once its entry was free',
    );
    const k = await kernelState(da.node.ns);
    expect(k.fdb).to.include.members([
      `${vtepMac(nl.address)} dst ${nl.address} self permanent`,
      `${vtepMac('10.100.1.99')} dst 10.100.1.99 self permanent`,
    ]);
    expect(await ping(da.pod, nl.podIp), 'pod behind da → pod of the Linux node').to.equal(true);
    const g2 = da.daemon.delete(da.session, moved.name);
    expect((await da.daemon.ackOf(da.session, moved.name, g2)).code).to.equal(AckCode.ACK_CODE_OK);
  });
});
