import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import { SimProcess, waitUntil } from '../support/sim-process';
import { attachRequest, detachRequest } from '../support/attach-request';
import { cniEnvelope, postCni } from '../support/cni-http';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { linuxHostLinks } from '../support/kernel-view';
import { addNodeUplink, ipJson, NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { pings } from '../support/ping';

// One daemon, two networks: `default` on the Linux backend (host veths) and `fast` on the DPU backend
// (the simulator in netns mode hands out "VFs"). A workload gets eth0 on one and net1 on the other;
// each network allocates from its own pools, routes its own way, and is reconciled by its own backend.

const DEFAULT_CIDR = '10.254.10.0/24';
const FAST_CIDR = '10.254.20.0/24';
const FAST_EXTRA_ROUTE = '10.254.99.0/24';
const FAST_MTU = 1400;
/** The leak sweep's period here: short, so that a deleted namespace's attachments go within the test. */
const SWEEP_MS = 300;

function v4(res: AttachResponse): string {
  return (res.ips.find((i) => i.family === 4)?.cidr ?? '').split('/')[0] ?? '';
}

function inCidr(address: string, cidr: string): boolean {
  return address.startsWith(cidr.split('.').slice(0, 3).join('.') + '.');
}

function routes(netns: string): Array<{ dst: string; gateway?: string; dev: string; metric?: number }> {
  return ipJson(netns, ['-4', 'route', 'show']);
}

function links(netns: string): Array<{ ifname: string; mtu: number }> {
  return ipJson(netns, ['link', 'show']);
}

describeRoot(
  'networks: a linux network and a DPU network in one daemon (root, test-owned namespaces)',
  function () {
    this.timeout(60_000);
    const namespaces = new NetnsSet(`wn-net-${process.pid}-`);
    let dir: string;
    let node: string;
    let dpu: string;
    let daemon: DaemonProcess;
    let sim: SimProcess;
    let configFile: string;
    const agentSocket = (): string => path.join(dir, 'agent.sock');

    /** Starts the daemon and waits until both networks are ready (the simulator reconnects by itself). */
    const startDaemon = async (): Promise<void> => {
      daemon = await DaemonProcess.start({ dir, netns: node, flags: { config: configFile } });
      await waitUntil(async () => (await daemon.client.status()).ready, 'both networks ready', 15_000);
    };
    const attach = (workloadId: string, netnsPath: string, ifName: string, network = '') =>
      daemon.client.call(daemon.client.raw.attach, attachRequest(workloadId, netnsPath, ifName, { network }));
    const refusal = (p: Promise<unknown>): Promise<grpc.ServiceError | undefined> =>
      p.then(
        () => undefined,
        (e: grpc.ServiceError) => e,
      );

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-net-'));
      node = namespaces.add().name;
      addNodeUplink(node, '10.250.0.1');
      dpu = namespaces.add().name;
      execFileSync('ip', ['-n', dpu, 'link', 'set', 'lo', 'up']);
      configFile = path.join(dir, 'config.json');
      fs.writeFileSync(
        configFile,
        JSON.stringify({
          dpu: { agentSocket: agentSocket() },
          sweepIntervalMs: SWEEP_MS,
          networks: [
            { name: 'default', backend: 'linux', podCidrs: [DEFAULT_CIDR] },
            {
              name: 'fast',
              backend: 'dpu',
              podCidrs: [FAST_CIDR],
              mtu: FAST_MTU,
              routes: [FAST_EXTRA_ROUTE],
            },
          ],
        }),
      );
      sim = SimProcess.start({
        socket: agentSocket(),
        agentId: 'wn-net-dpu',
        stateFile: path.join(dir, 'sim-state.json'),
        extra: ['--dataplane', 'netns', '--dpu-netns', dpu, '--host-netns', `/var/run/netns/${node}`],
      });
      await startDaemon();
    });

    after(async () => {
      await sim?.stop();
      await daemon?.stop();
      namespaces.cleanup();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('lists both networks in Status with their backends, routing and pools', async () => {
      const st = await daemon.client.status();
      expect(st.ready, st.reasons.join('; ')).to.equal(true);
      const byName = Object.fromEntries(st.networks.map((n) => [n.name, n]));
      expect(Object.keys(byName).sort()).to.deep.equal(['default', 'fast']);
      expect(byName.default?.backend).to.equal('linux');
      expect(byName.default?.defaultRoute).to.equal(true);
      expect(byName.fast?.backend).to.equal('dpu');
      expect(byName.fast?.defaultRoute).to.equal(false);
      expect(byName.fast?.mtu).to.equal(FAST_MTU);
      expect(byName.fast?.routes).to.have.members([FAST_CIDR, FAST_EXTRA_ROUTE]);
      expect(byName.fast?.pools.map((p) => p.cidr)).to.deep.equal([FAST_CIDR]);
      expect(st.pools.map((p) => p.cidr)).to.have.members([DEFAULT_CIDR, FAST_CIDR]);
    });

    it('refuses an unknown network with INVALID_ARGUMENT and changes nothing', async () => {
      const w = namespaces.add();
      const hostBefore = links(node).map((l) => l.ifname);
      const err = await refusal(attach('net-unknown', w.path, 'eth0', 'nosuch'));
      expect(err?.code).to.equal(grpc.status.INVALID_ARGUMENT);
      expect(err?.details).to.match(/unknown network "nosuch"/);
      expect(links(node).map((l) => l.ifname)).to.deep.equal(hostBefore);
      expect(links(w.name).map((l) => l.ifname)).to.deep.equal(['lo']);
      const list = await daemon.client.call(daemon.client.raw.list, {});
      expect(list.attachments.map((a) => a.workloadId)).to.not.include('net-unknown');
    });

    it('gives one workload eth0 on default (veth) and net1 on fast (DPU VF): own pools, one default route, traffic on each', async () => {
      const w = namespaces.add();
      const peerDefault = namespaces.add();
      const peerFast = namespaces.add();
      const eth0 = await attach('net-w', w.path, 'eth0');
      const net1 = await attach('net-w', w.path, 'net1', 'fast');
      const pd = await attach('net-peer-default', peerDefault.path, 'eth0');
      const pf = await attach('net-peer-fast', peerFast.path, 'eth0', 'fast');
      expect([eth0.network, net1.network, pd.network, pf.network]).to.deep.equal([
        'default',
        'fast',
        'default',
        'fast',
      ]);
      expect([eth0.backend, net1.backend]).to.deep.equal(['linux', 'dpu']);
      expect(inCidr(v4(eth0), DEFAULT_CIDR), v4(eth0)).to.equal(true);
      expect(inCidr(v4(net1), FAST_CIDR), v4(net1)).to.equal(true);
      expect(links(w.name).find((l) => l.ifname === 'net1')?.mtu).to.equal(FAST_MTU);

      const r = routes(w.name);
      expect(r.filter((x) => x.dst === 'default').map((x) => x.dev)).to.deep.equal(['eth0']);
      for (const dst of [FAST_CIDR, FAST_EXTRA_ROUTE])
        expect(
          r.some((x) => x.dst === dst && x.dev === 'net1' && x.gateway === '169.254.1.1'),
          `${dst} via net1`,
        ).to.equal(true);
      // A peer on fast has fast's routes only: no default route, since its network has none.
      expect(routes(peerFast.name).some((x) => x.dst === 'default')).to.equal(false);

      expect(await pings(w.name, v4(pd), { from: 'eth0' }), 'eth0 -> default peer').to.equal(true);
      expect(await pings(w.name, v4(pf), { from: 'net1' }), 'net1 -> fast peer').to.equal(true);
      expect(await pings(peerFast.name, v4(net1)), 'fast peer -> net1').to.equal(true);
      expect(await pings(peerDefault.name, v4(eth0)), 'default peer -> eth0').to.equal(true);

      const list = await daemon.client.call(daemon.client.raw.list, {});
      const mine = list.attachments.filter((a) => a.workloadId === 'net-w');
      expect(mine.map((a) => `${a.ifName}:${a.network}`).sort()).to.deep.equal(['eth0:default', 'net1:fast']);
    });

    it('shows the network of each attachment in ls and inspect, and every network in status', () => {
      const cli = (...args: string[]): string =>
        execFileSync(process.execPath, [CLI, ...args, '--socket', daemon.socket], { encoding: 'utf8' });
      const ls = cli('ls').split('\n');
      expect(ls[0]).to.match(/\bNETWORK\b/);
      expect(
        ls.some((l) => /^net-w\s+-\s+net1\s+fast\s+10\.254\.20\./.test(l)),
        ls.join('\n'),
      ).to.equal(true);
      expect(
        ls.some((l) => /^net-w\s+-\s+eth0\s+default\s+10\.254\.10\./.test(l)),
        ls.join('\n'),
      ).to.equal(true);
      expect(cli('inspect', 'net-w'))
        .to.match(/network:\s+fast/)
        .and.match(/network:\s+default/);
      const status = cli('status');
      expect(status).to.match(/network:\s+default \(linux, mtu 1500, default route\) \d+ attached, ready/);
      expect(status).to.match(
        new RegExp(
          `network:\\s+fast \\(dpu, mtu ${FAST_MTU}, routes [^)]*10\\.254\\.20\\.0/24[^)]*\\) \\d+ attached, ready`,
        ),
      );
    });

    it('refuses the same interface on another network with ALREADY_EXISTS', async () => {
      const w = namespaces.add();
      await attach('net-twice', w.path, 'eth0');
      const err = await refusal(attach('net-twice', w.path, 'eth0', 'fast'));
      expect(err?.code).to.equal(grpc.status.ALREADY_EXISTS);
      expect(err?.details).to.match(/network default/);
      await daemon.client.call(daemon.client.raw.detach, detachRequest('net-twice', w.path));
    });

    it('keeps both interfaces of a workload across a SIGKILL: each backend reconciles its own, no orphan removed', async () => {
      const w = namespaces.add();
      const peerFast = namespaces.add();
      const eth0 = await attach('net-kill', w.path, 'eth0');
      const net1 = await attach('net-kill', w.path, 'net1', 'fast');
      const pf = await attach('net-kill-peer', peerFast.path, 'eth0', 'fast');
      await daemon.kill('SIGKILL');
      await startDaemon();
      const st = await daemon.client.status();
      expect(st.reconcile?.orphansRemoved).to.equal(0);
      expect(st.reconcile?.released).to.equal(0);
      const got = await daemon.client.call(daemon.client.raw.get, { workloadId: 'net-kill', ifName: '' });
      expect(got.attachments.map((a) => `${a.ifName}:${a.network}`).sort()).to.deep.equal([
        'eth0:default',
        'net1:fast',
      ]);
      for (const ifName of ['eth0', 'net1']) {
        const check = await daemon.client.call(daemon.client.raw.check, { workloadId: 'net-kill', ifName });
        expect(check.drift, ifName).to.deep.equal([]);
      }
      expect(v4(eth0)).to.not.equal('');
      expect(await pings(w.name, v4(pf), { from: 'net1' }), 'net1 -> fast peer after restart').to.equal(true);
      expect(await pings(peerFast.name, v4(net1)), 'fast peer -> net1 after restart').to.equal(true);
    });

    it('detaches net1 without touching eth0, then the whole workload', async () => {
      const w = namespaces.add();
      const peer = namespaces.add();
      await attach('net-detach', w.path, 'eth0');
      await attach('net-detach', w.path, 'net1', 'fast');
      const pd = await attach('net-detach-peer', peer.path, 'eth0');
      await daemon.client.call(daemon.client.raw.detach, detachRequest('net-detach', w.path, 'net1'));
      expect(links(w.name).map((l) => l.ifname)).to.deep.equal(['lo', 'eth0']);
      expect(await pings(w.name, v4(pd)), 'eth0 still works').to.equal(true);
      await daemon.client.call(daemon.client.raw.detach, detachRequest('net-detach', w.path, ''));
      expect(links(w.name).map((l) => l.ifname)).to.deep.equal(['lo']);
      const st = await daemon.client.status();
      const fast = st.networks.find((n) => n.name === 'fast');
      // The peers of the earlier tests hold fast addresses; this workload's is back in the pool.
      const listed = (await daemon.client.call(daemon.client.raw.list, {})).attachments.filter(
        (a) => a.network === 'fast',
      ).length;
      expect(fast?.pools[0]?.used).to.equal(listed);
      expect(fast?.attachments).to.equal(listed);
    });

    it('releases both interfaces of a workload whose namespace is deleted, each through its own backend (leak sweep)', async () => {
      const w = namespaces.add();
      await attach('net-swept', w.path, 'eth0');
      await attach('net-swept', w.path, 'net1', 'fast');
      const portsBefore = sim.state()?.ports.map((p) => p.name) ?? [];
      expect(portsBefore).to.include('net-swept/net1');
      execFileSync('ip', ['netns', 'del', w.name]);
      await waitUntil(
        async () =>
          !(await daemon.client.call(daemon.client.raw.list, {})).attachments.some(
            (a) => a.workloadId === 'net-swept',
          ),
        'the sweep to release both',
        15_000,
        { intervalMs: 100 },
      );
      expect((await linuxHostLinks(node)).map((l) => l.ifalias)).to.not.include('workloadnet:net-swept/eth0');
      await waitUntil(
        async () => !(sim.state()?.ports ?? []).some((p) => p.name === 'net-swept/net1'),
        'the agent to drop the port',
        5_000,
      );
    });

    describe('over CNI, as Multus calls a plugin: the network config name selects the network', () => {
      const cni = async (
        command: string,
        containerId: string,
        netns: string,
        ifName: string,
        name: string,
        extra: Record<string, unknown> = {},
      ): Promise<{ exitCode: string | undefined; json: Record<string, unknown> }> => {
        const env = {
          CNI_COMMAND: command,
          CNI_CONTAINERID: containerId,
          CNI_NETNS: netns,
          CNI_IFNAME: ifName,
          CNI_PATH: '/opt/cni/bin',
        };
        const stdin = JSON.stringify({ cniVersion: '1.1.0', name, type: 'workloadnet', ...extra });
        const answer = await postCni(daemon.cniSocket, cniEnvelope(env, stdin));
        return {
          exitCode: answer.exitCode,
          json: answer.body ? (JSON.parse(answer.body) as Record<string, unknown>) : {},
        };
      };
      const cniIps = (json: Record<string, unknown>): string[] =>
        (json.ips as Array<{ address: string }>).map((i) => i.address.split('/')[0] ?? '');

      it('adds eth0 on default and net1 on fast for one container, refuses an unknown name with 7, scopes GC to the network, deletes both', async () => {
        const w = namespaces.add();
        const eth0 = await cni('ADD', 'ctr-multus', w.path, 'eth0', 'default');
        expect(eth0.exitCode, JSON.stringify(eth0.json)).to.equal('0');
        const net1 = await cni('ADD', 'ctr-multus', w.path, 'net1', 'fast');
        expect(net1.exitCode, JSON.stringify(net1.json)).to.equal('0');
        expect(inCidr(cniIps(eth0.json)[0] ?? '', DEFAULT_CIDR)).to.equal(true);
        expect(inCidr(cniIps(net1.json)[0] ?? '', FAST_CIDR)).to.equal(true);
        expect(links(w.name).map((l) => l.ifname)).to.have.members(['lo', 'eth0', 'net1']);

        const unknown = await cni('ADD', 'ctr-multus', w.path, 'net2', 'nosuch');
        expect(unknown.exitCode).to.equal('1');
        expect(unknown.json.code).to.equal(7);
        expect(links(w.name).map((l) => l.ifname)).to.not.include('net2');

        // The runtime's GC for "default" lists only default's attachments: fast's net1 must survive it.
        const gc = await cni('GC', '', '', '', 'default', {
          'cni.dev/valid-attachments': [{ containerID: 'ctr-multus', ifname: 'eth0' }],
        });
        expect(gc.exitCode, JSON.stringify(gc.json)).to.equal('0');
        const got = await daemon.client.call(daemon.client.raw.get, { workloadId: 'ctr-multus', ifName: '' });
        expect(got.attachments.map((a) => a.ifName).sort()).to.deep.equal(['eth0', 'net1']);

        expect((await cni('DEL', 'ctr-multus', w.path, 'net1', 'fast')).exitCode).to.equal('0');
        expect(links(w.name).map((l) => l.ifname)).to.deep.equal(['lo', 'eth0']);
        expect((await cni('DEL', 'ctr-multus', w.path, 'eth0', 'default')).exitCode).to.equal('0');
        expect(links(w.name).map((l) => l.ifname)).to.deep.equal(['lo']);
      });

      it('answers STATUS for the network its config selects: fast is unavailable while its agent is away, default is not', async () => {
        await sim.stop();
        await waitUntil(
          async () => (await daemon.client.status()).networks.find((n) => n.name === 'fast')?.ready === false,
          'the fast network to notice its agent is gone',
          15_000,
        );
        try {
          expect((await cni('STATUS', '', '', '', 'default')).exitCode).to.equal('0');
          const fast = await cni('STATUS', '', '', '', 'fast');
          expect(fast.exitCode).to.equal('1');
          expect(fast.json.code).to.equal(50);
          const unknown = await cni('STATUS', '', '', '', 'nosuch');
          expect(unknown.json.code).to.equal(7);
        } finally {
          sim = SimProcess.start({
            socket: agentSocket(),
            agentId: 'wn-net-dpu',
            stateFile: path.join(dir, 'sim-state.json'),
            extra: ['--dataplane', 'netns', '--dpu-netns', dpu, '--host-netns', `/var/run/netns/${node}`],
          });
        }
        await waitUntil(async () => (await daemon.client.status()).ready, 'the agent back', 15_000);
        expect((await cni('STATUS', '', '', '', 'fast')).exitCode).to.equal('0');
      });
    });
  },
);
