import { expect } from 'chai';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import type { SimState } from '../../backends/dpu-sim/state-file';
import { DEFAULT_CONFIG } from '../../core/config';
import { SimProcess, sleep } from '../support/sim-process';
import { attachRequest, detachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { codeName, outcome } from '../support/grpc-outcome';
import { hostLinksInGroup, linuxHostLinks } from '../support/kernel-view';
import { addNodeUplink } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { TortureRig } from '../support/torture-rig';
import { scaled, TORTURE_KILLS, TORTURE_SEED } from './torture-settings';
import { INTERFACES, linkNames } from '../support/mixed-networks';
import { resynced } from './resync';

// Mixed networks under SIGKILL: every workload may hold eth0 on `default` (Linux backend, a veth) and
// net1 on `fast` (DPU backend, the simulator in netns mode moves a "VF" into the workload), attached and
// detached one interface at a time by concurrent workers while the daemon is SIGKILLed at random
// moments. After every restart each backend has reconciled its own attachments only: the store, the
// kernel (host veths in the link group, the workloads' interfaces and their one default route) and the
// simulator's port table agree, and neither backend is left with an orphan or took the other's.

const DEFAULT_POOL = '10.247.10.0/24';
const FAST_POOL = '10.247.20.0/24';
const WORKLOADS = scaled(12);
const WORKERS = 5;
const execFileP = promisify(execFile);

interface Tally {
  attachOk: number;
  attachFailed: number;
  detachOk: number;
  detachFailed: number;
  daemonKills: number;
  invariantChecks: number;
}

async function defaultRouteDevs(netns: string): Promise<string[]> {
  const { stdout } = await execFileP('ip', ['-n', netns, '-j', '-4', 'route', 'show', 'default']);
  return (JSON.parse(stdout || '[]') as Array<{ dev: string }>).map((r) => r.dev);
}

describeRoot(
  'torture: mixed networks (linux default, DPU fast) under SIGKILL of the daemon (root)',
  function () {
    this.timeout(60_000 + TORTURE_KILLS * 15_000);
    const rig = new TortureRig<Tally>({
      name: 'torture-networks',
      seed: TORTURE_SEED,
      stream: 0x6e657473,
      workers: WORKERS,
      tally: {
        attachOk: 0,
        attachFailed: 0,
        detachOk: 0,
        detachFailed: 0,
        daemonKills: 0,
        invariantChecks: 0,
      },
    });
    const { rnd, tally } = rig;
    let node: string;
    let dpu: string;
    let configFile: string;
    let agentSocket: string;
    let sim: SimProcess | undefined;

    before(async () => {
      rig.setUp('tn-', WORKLOADS);
      node = rig.namespaces.add().name;
      addNodeUplink(node, '10.250.0.1');
      dpu = rig.namespaces.add().name;
      await execFileP('ip', ['-n', dpu, 'link', 'set', 'lo', 'up']);
      agentSocket = path.join(rig.dir, 'agent.sock');
      configFile = path.join(rig.dir, 'config.json');
      fs.writeFileSync(
        configFile,
        JSON.stringify({
          dpu: { agentSocket, ackTimeoutMs: 3000 },
          networks: [
            { name: 'default', backend: 'linux', podCidrs: [DEFAULT_POOL] },
            { name: 'fast', backend: 'dpu', podCidrs: [FAST_POOL] },
          ],
        }),
      );
    });

    after(async () => {
      await sim?.stop('SIGKILL');
      await rig.tearDown(
        `${tally.daemonKills} SIGKILLs of the daemon survived`,
        `${tally.invariantChecks} invariant checks`,
      );
    });

    const startDaemon = async (): Promise<DaemonProcess> =>
      (rig.daemon = await DaemonProcess.start({ dir: rig.dir, netns: node, flags: { config: configFile } }));

    /** Workers attach (six in ten) or detach one interface of a random workload until stopped. */
    function churn(
      d: DaemonProcess,
      ctl: { down: boolean; stop: boolean },
    ): { done: Promise<void>; unexpected: string[] } {
      const unexpected: string[] = [];
      const worker = async (): Promise<void> => {
        while (!ctl.stop) {
          const w = rnd.pick(rig.workloads);
          const i = rnd.pick(INTERFACES);
          const attach = rnd.chance(0.6);
          const what = `${attach ? 'attach' : 'detach'} ${w.id}/${i.ifName}`;
          const r = await outcome(
            attach
              ? d.client.call(
                  d.client.raw.attach,
                  attachRequest(w.id, w.ns.path, i.ifName, { network: i.network }),
                )
              : d.client.call(d.client.raw.detach, detachRequest(w.id, w.ns.path, i.ifName)),
          );
          if (r.code === grpc.status.OK) {
            if (attach) tally.attachOk++;
            else tally.detachOk++;
            continue;
          }
          if (attach) tally.attachFailed++;
          else tally.detachFailed++;
          if (!ctl.down) unexpected.push(`${what}: ${codeName(r.code)} ${r.details}`);
        }
      };
      return { done: Promise.all(Array.from({ length: WORKERS }, worker)).then(() => undefined), unexpected };
    }

    /** Waits until the daemon is ready and the simulator has applied a snapshot of its current session. */
    const waitForResync = (d: DaemonProcess, s: SimProcess, where: string): Promise<SimState> =>
      resynced(d, s, where, (st) => st.networks.find((n) => n.name === 'fast')?.backendDetails.sessionId);

    /** Retries `check` for a moment: the kernel and the simulator's state file settle asynchronously. */
    async function settled(check: () => Promise<void>): Promise<void> {
      for (let i = 0; ; i++) {
        try {
          return await check();
        } catch (err) {
          if (i >= 40) throw err;
          await sleep(50);
        }
      }
    }

    async function checkInvariants(d: DaemonProcess, s: SimProcess, round: number): Promise<void> {
      const where = `after kill ${round + 1} (seed ${TORTURE_SEED})`;
      await waitForResync(d, s, where);
      const list = (await d.client.call(d.client.raw.list, {})).attachments;
      const status = await d.client.status();
      expect(status.reconcile?.released ?? 0, `${where}: nothing released (every namespace lives)`).to.equal(
        0,
      );
      // Only an attach in flight at the kill can have been cut short: one per worker at most.
      expect(status.reconcile?.cutShort ?? 0, `${where}: attaches cut short`).to.be.at.most(WORKERS);
      const addresses = list.map((a) => a.result?.ips[0]?.cidr ?? '');
      expect(new Set(addresses).size, `${where}: an address held twice: ${addresses.join(' ')}`).to.equal(
        addresses.length,
      );
      for (const n of status.networks) {
        const mine = list.filter((a) => a.network === n.name);
        expect(
          n.pools.reduce((sum, p) => sum + p.used, 0),
          `${where}: ${n.name} pool usage`,
        ).to.equal(mine.length);
        expect(n.attachments, `${where}: ${n.name} attachment count`).to.equal(mine.length);
        for (const a of mine)
          expect(a.result?.backend, `${where}: ${a.workloadId}/${a.ifName} backend`).to.equal(n.backend);
      }
      tally.invariantChecks++;

      const byNetwork = (network: string) => list.filter((a) => a.network === network);
      // Linux: exactly the default network's host veths, nothing left in the detach group.
      await settled(async () => {
        const links = (await linuxHostLinks(node)).map((l) => l.ifname).sort();
        const expected = byNetwork('default')
          .map((a) => a.result?.backendDetails.hostIfName ?? '')
          .sort();
        expect(links, `${where}: linux host links`).to.deep.equal(expected);
        expect(
          await hostLinksInGroup(node, DEFAULT_CONFIG.linux.detachGroup),
          `${where}: detach group`,
        ).to.deep.equal([]);
      });
      // DPU: exactly the fast network's ports, with their addresses.
      await settled(async () => {
        const ports = s.state()?.ports ?? [];
        const fast = new Map(
          byNetwork('fast').map((a) => [`${a.workloadId}/${a.ifName}`, a.result?.ips[0]?.cidr ?? '']),
        );
        expect(ports.map((p) => p.name).sort(), `${where}: simulator ports`).to.deep.equal(
          [...fast.keys()].sort(),
        );
        for (const p of ports) expect(p.ips, `${where}: port ${p.name}`).to.deep.equal([fast.get(p.name)]);
      });
      tally.invariantChecks++;
      // Every workload namespace: exactly its attached interfaces, and eth0, when attached, the one
      // default route (net1 never carries one).
      await settled(async () => {
        for (const w of rig.workloads) {
          const attached = list.filter((a) => a.workloadId === w.id).map((a) => a.ifName);
          expect(await linkNames(w.ns.name), `${where}: interfaces of ${w.id}`).to.deep.equal(
            ['lo', ...attached].sort(),
          );
          expect(await defaultRouteDevs(w.ns.name), `${where}: default routes of ${w.id}`).to.deep.equal(
            attached.includes('eth0') ? ['eth0'] : [],
          );
        }
      });
      tally.invariantChecks++;
    }

    it(`keeps store, kernel and simulator consistent across ${TORTURE_KILLS} SIGKILLs during mixed-network churn`, async () => {
      let daemon = await startDaemon();
      sim = SimProcess.start({
        socket: agentSocket,
        agentId: 'torture-networks',
        stateFile: path.join(rig.dir, 'sim-state.json'),
        extra: [
          '--dataplane',
          'netns',
          '--dpu-netns',
          dpu,
          '--host-netns',
          `/var/run/netns/${node}`,
          '--log-level',
          'info',
        ],
      });
      await waitForResync(daemon, sim, 'start-up');
      for (let round = 0; round < TORTURE_KILLS; round++) {
        const ctl = { down: false, stop: false };
        const load = churn(daemon, ctl);
        await sleep(rnd.int(5, 400));
        ctl.down = true;
        ctl.stop = true;
        await daemon.kill('SIGKILL');
        tally.daemonKills++;
        await load.done;
        expect(
          load.unexpected,
          `round ${round + 1}: calls that failed although the daemon was up`,
        ).to.deep.equal([]);
        daemon = await startDaemon();
        await checkInvariants(daemon, sim, round);
      }
      expect(tally.attachOk, 'the churn attached something').to.be.greaterThan(0);
      expect(tally.detachOk, 'the churn detached something').to.be.greaterThan(0);
    });
  },
);
