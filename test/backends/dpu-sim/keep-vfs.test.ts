import { expect } from 'chai';
import * as path from 'node:path';
import type { Port } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { describeRoot } from '../../support/describe-root';
import { NetnsSet, ipJson } from '../../support/netns';
import { removeDir, scratchDir } from '../../support/dpu-fixtures';
import { SimProcess } from '../../support/sim-process';
import { OK, ScriptedDaemon, type Session } from './scripted-daemon';

// A simulator in netns mode SIGKILLed and started again with a new boot id. With --keep-vfs it plays a
// DPU whose agent restarted while its NIC ran on: each VF stays where it was (one in a workload's
// namespace, one in the host namespace), with its ifindex, and is programmed in place when the daemon
// sends its port again; the VF of a port the next whole snapshot does not list is removed then. Without
// it, the restart is a power cycle: the VFs are removed and made anew.

const ip = (ns: string, ...args: string[]): unknown[] => ipJson<unknown[]>(ns, args);

function ifindex(ns: string, dev: string): number | undefined {
  try {
    return (ip(ns, 'link', 'show', 'dev', dev)[0] as { ifindex: number } | undefined)?.ifindex;
  } catch {
    return undefined;
  }
}

const links = (ns: string): string[] =>
  (ip(ns, 'link', 'show') as Array<{ ifname: string }>).map((l) => l.ifname);

describeRoot('DPU simulator: VFs kept across its restart (netns mode, needs root)', function () {
  this.timeout(60_000);
  const nets = new NetnsSet('wnkv-');
  let dir: string;
  let daemon: ScriptedDaemon;
  let sim: SimProcess | undefined;
  let host: { name: string; path: string };
  let dpu: { name: string; path: string };
  let pod: { name: string; path: string };

  const port = (n: number): Port => ({
    name: `kv-${n}/eth0`,
    generation: daemon.nextGeneration(),
    mac: `02:00:00:00:07:0${n}`,
    ips: [`10.97.0.${n}/32`],
    routes: [{ destination: '0.0.0.0/0', gateway: '169.254.1.1' }],
    mtu: 1450,
    vlan: 0,
    vni: 0,
    workloadId: `kv-${n}`,
    ifName: 'eth0',
  });

  function startSim(boot: string, keepVfs: boolean): SimProcess {
    return SimProcess.start({
      socket: daemon.socket,
      agentId: 'kv-dpu',
      bootId: boot,
      stateFile: path.join(dir, 'sim.json'),
      extra: [
        ...['--dataplane', 'netns', '--dpu-netns', dpu.name, '--host-netns', host.path, '--no-fabric'],
        ...(keepVfs ? ['--keep-vfs'] : []),
      ],
    });
  }

  /** A session's snapshot of `ports`, every ack OK and the snapshot applied; the VF of each port. */
  async function sync(s: Session, current: SimProcess, ports: Port[]): Promise<string[]> {
    daemon.snapshot(s, [], { ports });
    const acks = await Promise.all(ports.map((p) => daemon.ackOf(s, p.name, p.generation)));
    expect(acks.map((a) => a.code)).to.deep.equal(ports.map(() => OK));
    await current.waitForState((st) => st.synced, 'snapshot applied');
    return acks.map((a) => a.endpoint?.netdev ?? '');
  }

  /** Boot 1 with three ports: the first one's VF moved into the pod as eth0, the others left in the host. */
  async function firstBoot(keepVfs: boolean): Promise<string[]> {
    sim = startSim('boot-1', keepVfs);
    const vfs = await sync(await daemon.session(), sim, [port(1), port(2), port(3)]);
    ip(host.name, 'link', 'set', vfs[0] ?? '', 'netns', pod.name);
    ip(pod.name, 'link', 'set', vfs[0] ?? '', 'name', 'eth0');
    ip(pod.name, 'link', 'set', 'eth0', 'up');
    return vfs;
  }

  /** SIGKILL, then a start with a new boot id and a session other than the one before. */
  async function reboot(keepVfs: boolean): Promise<Session> {
    const before = daemon.sessions.length;
    await sim?.stop('SIGKILL');
    sim = startSim('boot-2', keepVfs);
    await sim.waitForState((st) => st.session.state === 'connected', 'connected again');
    expect(daemon.sessions.length).to.be.greaterThan(before);
    return daemon.session();
  }

  beforeEach(async () => {
    dir = scratchDir();
    host = nets.add('host');
    dpu = nets.add('dpu');
    pod = nets.add('pod');
    daemon = await ScriptedDaemon.start(path.join(dir, 'agent.sock'));
  });

  afterEach(async () => {
    await sim?.stop('SIGKILL');
    sim = undefined;
    await daemon.stop();
    nets.cleanup();
    removeDir(dir);
  });

  it('keeps each VF where it is with its ifindex, programs it in place, and removes the VF of a port no longer sent', async () => {
    const vfs = await firstBoot(true);
    const inPod = ifindex(pod.name, 'eth0');
    const inHost = ifindex(host.name, vfs[1] ?? '');
    expect(inPod, 'VF 1 in the pod').to.be.a('number');
    expect(inHost, 'VF 2 in the host').to.be.a('number');

    const s = await reboot(true);
    // Ports 1 and 2 sent again (a new generation, as a daemon does to a new boot); port 3 not.
    const again = await sync(s, sim!, [port(1), port(2)]);
    expect(again, 'each port acked with the VF it had').to.deep.equal(vfs.slice(0, 2));
    expect(ifindex(pod.name, 'eth0'), 'VF 1: still the pod eth0, same ifindex').to.equal(inPod);
    expect(ifindex(host.name, vfs[1] ?? ''), 'VF 2: still in the host, same ifindex').to.equal(inHost);
    expect(links(host.name), "port 3's VF removed after the snapshot").to.not.include(vfs[2]);
    expect(links(dpu.name), 'representors of ports 1 and 2 only').to.include.members(['rp0v0', 'rp0v1']);
    expect(links(dpu.name)).to.not.include('rp0v2');
    const routes = ip(dpu.name, 'route', 'show', '10.97.0.1') as Array<{ dev: string }>;
    expect(
      routes.map((r) => r.dev),
      "port 1's route via its representor",
    ).to.deep.equal(['rp0v0']);
    expect(sim!.stderr.match(/kept a VF left from an earlier start/g)?.length, 'VFs kept').to.equal(3);
    expect(sim!.stderr).to.not.include('removed a port left from an earlier boot');
  });

  it('without --keep-vfs a new boot is a power cycle: the VFs are removed and made anew', async () => {
    const vfs = await firstBoot(false);
    const inHost = ifindex(host.name, vfs[1] ?? '');
    const s = await reboot(false);
    expect(links(pod.name), "the pod's VF went with its representor").to.not.include('eth0');
    await sync(s, sim!, [port(1), port(2)]);
    expect(ifindex(host.name, vfs[1] ?? ''), 'VF 2 made anew')
      .to.be.a('number')
      .and.not.equal(inHost);
    expect(sim!.stderr.match(/removed a port left from an earlier boot/g)?.length).to.equal(3);
  });
});
