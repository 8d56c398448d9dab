import { expect } from 'chai';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { SimState } from '../../backends/dpu-sim/state-file';
import { SimProcess, sleep } from '../support/sim-process';
import type { AttachChurn, ChurnCounts } from '../support/attach-churn';
import { DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { codeName } from '../support/grpc-outcome';
import { TortureRig } from '../support/torture-rig';
import { scaled, TORTURE_KILLS, TORTURE_SEED } from './torture-settings';
import { resynced } from './resync';

// Attach/detach churn through the real daemon with the DPU backend while either the daemon or the
// agent simulator is SIGKILLed at random moments. The simulator comes back with its old boot id (it
// resumes the port table its state file held: behind by changes it had not acked yet, never by one it
// acked) or a new one (its state is gone). After every resync the store, the daemon's view and the
// simulator's table must agree: no address held twice, every attachment's port in the simulator, and
// no simulator port without its attachment.

const POOL = '10.252.0.0/24';
const WORKLOADS = scaled(16);
const WORKERS = 6;
const AGENT_ID = 'torture-dpu';
/** While the agent is down, an Attach fails at once with UNAVAILABLE (or times out waiting for its ack). */
const AGENT_DOWN_CODES = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED]);

interface Tally extends ChurnCounts {
  daemonKills: number;
  simKills: number;
  simResumes: number;
  invariantChecks: number;
}

type Phase = 'up' | 'agent-down' | 'daemon-down';

describeRoot('torture: DPU backend with the simulator under SIGKILL of daemon and agent (root)', function () {
  this.timeout(60_000 + TORTURE_KILLS * 10_000);
  const rig = new TortureRig<Tally>({
    name: 'torture-dpu',
    seed: TORTURE_SEED,
    stream: 0x5a5a5a5a,
    workers: WORKERS,
    tally: {
      daemonKills: 0,
      simKills: 0,
      simResumes: 0,
      attachOk: 0,
      attachFailed: 0,
      detachOk: 0,
      detachFailed: 0,
      invariantChecks: 0,
    },
  });
  const { rnd, tally } = rig;
  let node: string;
  let agentSocket: string;
  let stateFile: string;
  let sim: SimProcess | undefined;
  let bootSerial = 0;
  let bootId = '';

  before(() => {
    rig.setUp('td-', WORKLOADS);
    agentSocket = path.join(rig.dir, 'agent.sock');
    stateFile = path.join(rig.dir, 'sim-state.json');
    // The daemon runs in a node namespace of its own; with the simulator's "none" dataplane nothing is
    // plumbed, but workload paths must still be real network namespaces to pass validation.
    node = rig.namespaces.add().name;
  });

  after(async () => {
    await sim?.stop('SIGKILL');
    await rig.tearDown(
      `${tally.daemonKills + tally.simKills} SIGKILLs survived ` +
        `(daemon ${tally.daemonKills}, simulator ${tally.simKills}, of which ${tally.simResumes} resumed the same boot)`,
      `${tally.invariantChecks} invariant checks`,
    );
  });

  const startDaemon = async (): Promise<DaemonProcess> =>
    (rig.daemon = await DaemonProcess.start({
      dir: rig.dir,
      netns: node,
      flags: { backend: 'dpu', 'agent-socket': agentSocket, 'pod-cidr': POOL, 'ack-timeout-ms': '3000' },
    }));

  /** Starts the simulator, keeping its boot (and so its saved port table) or booting it afresh. */
  function startSim(sameBoot: boolean): SimProcess {
    if (!sameBoot || !bootId) bootId = `boot-${++bootSerial}`;
    return SimProcess.start({
      socket: agentSocket,
      agentId: AGENT_ID,
      bootId,
      stateFile,
      extra: ['--dataplane', 'none', '--log-level', 'info'],
    });
  }

  /** Churn until stopped; a failure is a bug unless the daemon is down, or the agent is and it says so. */
  const churn = (d: DaemonProcess, ctl: { phase: Phase }): AttachChurn =>
    rig.churn(d, {
      judgeFailure: (what, r) => {
        if (ctl.phase === 'daemon-down') return undefined;
        if (ctl.phase === 'agent-down' && AGENT_DOWN_CODES.has(r.code)) return undefined;
        return `${what} (${ctl.phase}): ${codeName(r.code)} ${r.details}`;
      },
    });

  /** Waits until the simulator has applied a snapshot on the daemon's current session. */
  const waitForResync = (d: DaemonProcess, s: SimProcess, where: string): Promise<SimState> =>
    resynced(d, s, where, (st) => st.backendDetails.sessionId);

  async function checkInvariants(d: DaemonProcess, s: SimProcess, round: number): Promise<void> {
    const where = `after kill ${round + 1} (seed ${TORTURE_SEED})`;
    await waitForResync(d, s, where);
    const list = (await d.client.call(d.client.raw.list, {})).attachments;
    const status = await d.client.status();
    expect(
      list.filter((a) => a.state !== 'ready').map((a) => a.workloadId),
      `${where}: unfinished attachments`,
    ).to.deep.equal([]);
    const addressOf = new Map(list.map((a) => [`${a.workloadId}/${a.ifName}`, a.result?.ips[0]?.cidr ?? '']));
    const addresses = [...addressOf.values()];
    expect(new Set(addresses).size, `${where}: an address is held twice: ${addresses.join(' ')}`).to.equal(
      addresses.length,
    );
    expect(status.pools[0]?.used, `${where}: pool usage matches the attachments`).to.equal(list.length);
    tally.invariantChecks++;

    // The state file is rewritten asynchronously: give the last write a moment before judging.
    let ports: SimState['ports'] = [];
    const expectedNames = [...addressOf.keys()].sort();
    for (let i = 0; i < 40; i++) {
      ports = s.state()?.ports ?? [];
      if (
        ports
          .map((p) => p.name)
          .sort()
          .join() === expectedNames.join()
      )
        break;
      await sleep(25);
    }
    const names = ports.map((p) => p.name).sort();
    expect(
      names.filter((n) => !addressOf.has(n)),
      `${where}: simulator ports without an attachment`,
    ).to.deep.equal([]);
    expect(
      expectedNames.filter((k) => !names.includes(k)),
      `${where}: attachments whose port the simulator lacks`,
    ).to.deep.equal([]);
    tally.invariantChecks++;
    for (const p of ports)
      expect(p.ips, `${where}: addresses of port ${p.name}`).to.deep.equal([addressOf.get(p.name)]);
    const portAddresses = ports.flatMap((p) => p.ips);
    expect(new Set(portAddresses).size, `${where}: an address on two simulator ports`).to.equal(
      portAddresses.length,
    );
    tally.invariantChecks++;
  }

  it(`keeps store and simulator consistent across ${TORTURE_KILLS} SIGKILLs of the daemon or the agent during churn`, async () => {
    let daemon = await startDaemon();
    sim = startSim(false);
    await waitForResync(daemon, sim, 'start-up');
    for (let round = 0; round < TORTURE_KILLS; round++) {
      const ctl: { phase: Phase } = { phase: 'up' };
      const load = churn(daemon, ctl);
      await sleep(rnd.int(5, 400));
      if (rnd.chance(0.5)) {
        ctl.phase = 'daemon-down';
        load.stop();
        await daemon.kill('SIGKILL');
        tally.daemonKills++;
        await load.done;
        daemon = await startDaemon();
      } else {
        ctl.phase = 'agent-down';
        await sim.stop('SIGKILL');
        tally.simKills++;
        // The churn goes on while the agent is away and while it comes back.
        await sleep(rnd.int(0, 300));
        const sameBoot = rnd.chance(0.5);
        if (sameBoot) tally.simResumes++;
        sim = startSim(sameBoot);
        await sleep(rnd.int(0, 300));
        load.stop();
        await load.done;
      }
      expect(
        load.unexpected,
        `round ${round + 1}: calls that failed although daemon and agent were up`,
      ).to.deep.equal([]);
      await checkInvariants(daemon, sim, round);
    }
    expect(tally.attachOk, 'the churn attached something').to.be.greaterThan(0);
    expect(tally.detachOk, 'the churn detached something').to.be.greaterThan(0);
  });
});
