import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import type { DataplaneResult } from '../../../core/backend';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { ipJson, type TestNamespace } from '../../support/netns';
import { NetnsDpuRig } from '../../support/netns-dpu-rig';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { spec, startBackend, view } from '../../support/dpu-fixtures';
import { measureMbps } from './throughput';
import { waitUntil } from '../../support/sim-process';
import { attachTo, type TestSpec } from '../../support/attach-spec';

// The whole offload with real interfaces: a node namespace (the host side), a namespace standing for
// the DPU, and two workloads. The simulator plumbs a veth per port between the node and the DPU, the
// daemon moves the VF end into the workload, and a ping between the workloads must cross the DPU.

interface LinkStats {
  ifname: string;
  stats64?: { rx: { packets: number }; tx: { packets: number } };
}

function rxPackets(netns: string, dev: string): number {
  const [l] = ipJson<LinkStats[]>(netns, ['-s', 'link', 'show', 'dev', dev]);
  return l?.stats64?.rx.packets ?? -1;
}

function linkNames(netns: string): string[] {
  return ipJson<Array<{ ifname: string }>>(netns, ['link', 'show']).map((l) => l.ifname);
}

/** Three quick echoes: one answer is enough. */
const ping = (fromNetns: string, to: string): Promise<boolean> =>
  pings(fromNetns, to, { count: 3, intervalSeconds: 0.2, waitSeconds: 1 });

describeRoot('DPU offload with the netns dataplane (needs root)', function () {
  this.timeout(60_000);
  const rig = new NetnsDpuRig('wnd-', 'dpu-netns', 'boot-1');
  let w1: TestNamespace;
  let w2: TestNamespace;

  beforeEach(() => {
    w1 = rig.workload();
    w2 = rig.workload();
  });

  it('moves the VF into the workload, and two workloads ping each other through the DPU namespace', async () => {
    const s1 = rig.workloadSpec(1, w1);
    const s2 = rig.workloadSpec(2, w2);
    const r1 = await attachTo(rig.backend!, s1);
    const r2 = await attachTo(rig.backend!, s2);

    // The VF is now the workload's eth0, with the port's MAC, the /32 and the default route.
    // A VF of the simulated DPU's pool: "<PF name>v<index>", its identity stored with the attachment.
    expect(r1.hostIfName).to.match(/^s[0-9a-f]{4}f\d+v\d+$/);
    expect(r1.details).to.include({ dpuPf: 0, dpuRepresentor: 'rp0v0' });
    const [eth0] = ipJson<Array<{ ifname: string; mtu: number; address: string; operstate: string }>>(
      w1.name,
      ['link', 'show', 'dev', 'eth0'],
    );
    expect(eth0?.mtu).to.equal(1500);
    expect(eth0?.address).to.equal(r1.mac);
    expect(r1.mac).to.equal(r1.details?.dpuMac);
    const addrs = ipJson<Array<{ addr_info: Array<{ local: string; prefixlen: number }> }>>(w1.name, [
      'addr',
      'show',
      'dev',
      'eth0',
    ]);
    expect(addrs[0]?.addr_info.map((a) => `${a.local}/${a.prefixlen}`)).to.include('10.90.0.3/32');
    const routes = ipJson<Array<{ dst: string; gateway?: string; dev: string }>>(w1.name, ['route', 'show']);
    // The same workload side as the Linux backend's: a scope-link route to the gateway, then the
    // default route via it (no "onlink" default route).
    expect(routes.map((r) => ({ dst: r.dst, gateway: r.gateway, dev: r.dev }))).to.have.deep.members([
      { dst: 'default', gateway: '169.254.1.1', dev: 'eth0' },
      { dst: '169.254.1.1', gateway: undefined, dev: 'eth0' },
    ]);
    const [lo] = ipJson<Array<{ flags: string[] }>>(w1.name, ['link', 'show', 'dev', 'lo']);
    expect(lo?.flags, 'loopback is up in the workload').to.include('UP');
    expect(linkNames(rig.node.name), 'the VF left the node namespace').to.not.include(r1.hostIfName);
    expect(await rig.backend!.check(view(s1, r1))).to.deep.equal([]);

    const st = rig.sim!.state();
    const rep1 = st?.ports.find((p) => p.name === s1.key)?.representor;
    const rep2 = st?.ports.find((p) => p.name === s2.key)?.representor;
    if (!rep1 || !rep2) throw new Error(`representors not in the state file: ${JSON.stringify(st)}`);
    const before = [rxPackets(rig.dpu.name, rep1), rxPackets(rig.dpu.name, rep2)];
    expect(await ping(w1.name, '10.90.0.4'), 'ping w1 → w2').to.equal(true);
    const after = [rxPackets(rig.dpu.name, rep1), rxPackets(rig.dpu.name, rep2)];
    // Echo requests enter the DPU on w1's representor and replies on w2's.
    expect(after[0]! - before[0]!).to.be.at.least(3);
    expect(after[1]! - before[1]!).to.be.at.least(3);

    // Without w2's port the DPU has no route to it: the same ping fails.
    await rig.backend!.detach(view(s2, r2));
    expect(await ping(w1.name, '10.90.0.4'), 'ping to a detached workload').to.equal(false);
    expect(linkNames(rig.dpu.name), rig.sim!.stderr.slice(-3000)).to.not.include(rep2);
    expect(linkNames(w2.name)).to.not.include('eth0');

    // A presence check (the host port's) looks for the interface only: w1's routes flushed are drift
    // to a full check, not to it.
    execFileSync('ip', ['-n', w1.name, 'route', 'flush', 'dev', 'eth0']);
    expect((await rig.backend!.check(view(s1, r1))).map((d) => d.kind)).to.include('route-missing');
    expect(await rig.backend!.check(view(s1, r1), 'presence')).to.deep.equal([]);
  });

  it('carries IPv6 across the DPU: each representor answers for fe80::1', async () => {
    const v6 = (i: number, ns: { path: string }): TestSpec =>
      spec(i, {
        netnsPath: ns.path,
        netnsInode: fs.statSync(ns.path).ino,
        ips: [
          { family: 4, address: `10.90.0.${i + 2}`, gateway: '169.254.1.1' },
          { family: 6, address: `fd00:90::${i + 2}`, gateway: 'fe80::1' },
        ],
      });
    await attachTo(rig.backend!, v6(1, w1));
    await attachTo(rig.backend!, v6(2, w2));
    const routes = ipJson<Array<{ dst: string; gateway?: string }>>(w1.name, ['-6', 'route', 'show']);
    expect(routes.find((r) => r.dst === 'default')?.gateway).to.equal('fe80::1');
    expect(await ping(w1.name, 'fd00:90::4'), 'ping6 w1 → w2').to.equal(true);
    expect(await ping(w2.name, 'fd00:90::3'), 'ping6 w2 → w1').to.equal(true);
  });

  it('shapes a port to its max_tx_rate with a tbf on its representor, measured with real traffic', async () => {
    const limited = spec(2, {
      netnsPath: w2.path,
      netnsInode: fs.statSync(w2.path).ino,
      dpuPort: { maxTxRateMbps: 40 },
    });
    const r1 = await attachTo(rig.backend!, rig.workloadSpec(1, w1));
    const r2 = await attachTo(rig.backend!, limited);
    const rep2 = String(r2.details?.dpuRepresentor);
    const rep1 = String(r1.details?.dpuRepresentor);
    const qdisc = JSON.parse(
      execFileSync('tc', ['-n', rig.dpu.name, '-j', 'qdisc', 'show', 'dev', rep2], { encoding: 'utf8' }),
    ) as Array<{ kind: string }>;
    expect(qdisc.map((q) => q.kind)).to.include('tbf');
    const unshaped = JSON.parse(
      execFileSync('tc', ['-n', rig.dpu.name, '-j', 'qdisc', 'show', 'dev', rep1], { encoding: 'utf8' }),
    ) as Array<{ kind: string }>;
    expect(unshaped.map((q) => q.kind)).to.not.include('tbf');

    const toLimited = await measureMbps(w1.name, w2.name, '10.90.0.4');
    const toFree = await measureMbps(w2.name, w1.name, '10.90.0.3');
    // The shaper holds the rate (with room for the burst), and it is what holds it: the other
    // direction, through an unshaped representor, runs far faster.
    expect(toLimited, `shaped: ${toLimited.toFixed(1)} Mbit/s`).to.be.within(10, 40 * 1.25);
    expect(toFree, `unshaped: ${toFree.toFixed(1)} Mbit/s`).to.be.greaterThan(4 * 40);
  });

  it('puts re-created VFs back into their workloads after the DPU reboots', async () => {
    await attachTo(rig.backend!, rig.workloadSpec(1, w1));
    await attachTo(rig.backend!, rig.workloadSpec(2, w2));
    expect(await ping(w1.name, '10.90.0.4')).to.equal(true);
    await rig.sim!.stop('SIGKILL');
    // A new boot id: the simulated DPU starts empty, which takes the VFs out of the workloads.
    rig.sim = await rig.startSim('boot-2');
    await waitUntil(
      () => linkNames(w1.name).includes('eth0') && linkNames(w2.name).includes('eth0'),
      'both workloads to get their interface back',
    );
    expect(
      rig.sim!.stderr.match(/removed a port left from an earlier boot/g)?.length,
      'old ports wiped',
    ).to.equal(2);
    expect(await ping(w1.name, '10.90.0.4'), 'ping after the DPU reboot').to.equal(true);
  });

  it("changes a running port's MTU in place: the VF in the workload and the representor, same interface, traffic kept", async () => {
    const s1 = rig.workloadSpec(1, w1);
    const r1: DataplaneResult = await attachTo(rig.backend!, s1);
    await attachTo(rig.backend!, rig.workloadSpec(2, w2));
    const rep = rig.sim!.state()?.ports.find((p) => p.name === s1.key)?.representor ?? '';
    const link = (ns: string, dev: string): { ifindex: number; mtu: number } | undefined => {
      const l = ipJson<Array<{ ifindex: number; mtu: number }>>(ns, ['link', 'show', 'dev', dev])[0];
      return l && { ifindex: l.ifindex, mtu: l.mtu };
    };
    const before = link(w1.name, 'eth0');
    // A route of the pod's that carries the interface's MTU follows it; one set smaller on purpose stays.
    execFileSync('ip', [
      '-n',
      w1.name,
      'route',
      'add',
      '10.55.0.0/24',
      'via',
      '169.254.1.1',
      'dev',
      'eth0',
      'mtu',
      '1500',
    ]);
    execFileSync('ip', [
      '-n',
      w1.name,
      'route',
      'add',
      '10.56.0.0/24',
      'via',
      '169.254.1.1',
      'dev',
      'eth0',
      'mtu',
      '1300',
    ]);
    const routeMtu = (dst: string): number | undefined =>
      ipJson<Array<{ metrics?: Array<{ mtu?: number }> }>>(w1.name, ['route', 'show', dst])[0]?.metrics?.find(
        (m) => m.mtu !== undefined,
      )?.mtu;
    const ns = await NetnsHandle.open(w1.path);
    try {
      await rig.backend!.setMtu(view(s1, r1), ns, 1400);
      expect(link(w1.name, 'eth0')).to.deep.equal({ ifindex: before?.ifindex, mtu: 1400 });
      expect(link(rig.dpu.name, rep)?.mtu, "the agent's end, the representor").to.equal(1400);
      expect(routeMtu('10.55.0.0/24')).to.equal(1400);
      expect(routeMtu('10.56.0.0/24'), 'a smaller route MTU is kept').to.equal(1300);
      expect(await rig.backend!.check(view({ ...s1, mtu: 1400 }, r1))).to.deep.equal([]);
      expect(await ping(w1.name, '10.90.0.4'), 'traffic through the DPU after the change').to.equal(true);

      await rig.backend!.setMtu(view({ ...s1, mtu: 1400 }, r1), ns, 1500);
      expect(link(w1.name, 'eth0')).to.deep.equal({ ifindex: before?.ifindex, mtu: 1500 });
      expect(link(rig.dpu.name, rep)?.mtu).to.equal(1500);

      // Its agent away (once the backend has seen it go): refused, nothing changed on either end.
      await rig.sim!.stop('SIGKILL');
      await waitUntil(
        async () => (await rig.backend!.health()).dpus?.some((d) => !d.connected) ?? false,
        'the backend to see its agent gone',
      );
      const err = await rig.backend!.setMtu(view(s1, r1), ns, 1450).then(
        () => undefined,
        (e: Error & { code?: string }) => e,
      );
      expect(err?.code).to.equal('UNAVAILABLE');
      expect(link(w1.name, 'eth0')?.mtu).to.equal(1500);
      expect(link(rig.dpu.name, rep)?.mtu).to.equal(1500);
    } finally {
      ns.close();
    }
  });

  it('reports drift in the workload interface and hands the VF back on detach', async () => {
    const s1 = rig.workloadSpec(1, w1);
    const r1: DataplaneResult = await attachTo(rig.backend!, s1);
    execFileSync('ip', ['-n', w1.name, 'link', 'set', 'eth0', 'mtu', '1400']);
    const drift = await rig.backend!.check(view(s1, r1));
    expect(drift.map((d) => d.kind)).to.deep.equal(['mtu-changed']);

    await rig.backend!.detach(view(s1, r1));
    expect(linkNames(w1.name)).to.not.include('eth0');
    // The agent deletes the port after the VF is back, so neither end remains anywhere.
    expect(linkNames(rig.node.name)).to.not.include(r1.hostIfName);
    expect(linkNames(rig.dpu.name).filter((n) => n.startsWith('rp'))).to.deep.equal([]);
    // Detach again, with everything gone: still fine.
    await rig.backend!.detach(view(s1, r1));
  });

  it('reports a port whose workload interface vanished as missing at reconcile', async () => {
    const s1 = rig.workloadSpec(1, w1);
    const s2 = rig.workloadSpec(2, w2);
    const r1 = await attachTo(rig.backend!, s1);
    const r2 = await attachTo(rig.backend!, s2);
    await rig.backend!.stop();
    execFileSync('ip', ['-n', w2.name, 'link', 'del', 'eth0']);
    rig.backend = await startBackend(rig.dir, { hostNetnsPath: rig.node.path }, false);
    const outcome = await rig.backend.reconcile([view(s1, r1), view(s2, r2)]);
    expect(outcome.healthy).to.deep.equal([s1.key]);
    expect(outcome.missing).to.deep.equal([s2.key]);
  });
});
