import { expect } from 'chai';
import * as fc from 'fast-check';
import * as path from 'node:path';
import type { DataplaneResult } from '../../../core/backend';
import type { DpuBackend } from '../../../backends/dpu';
import { attachTo } from '../../support/attach-spec';
import { removeDir, scratchDir, spec, startBackend, view } from '../../support/dpu-fixtures';
import { SimProcess, waitUntil } from '../../support/sim-process';

// An agent SIGKILLed and restarted with the same boot id resumes the port table its state file held,
// which a slow disk keeps behind the agent's memory. While the daemon's store is new, its snapshots keep
// the ports they do not list, and a port it removed goes only by a Delete, sent until the agent acks it:
// so an acked change must be one the resumed table holds, or the port comes back and nothing removes it
// (it holds a VF and an address on the DPU). Random attaches, detaches and restarts (same boot or new)
// against the real simulator on a slow disk: after every resync the agent holds exactly the attached
// ports.

const AGENT = 'dpu-r';
/** Long against a detach followed at once by a SIGKILL, short against the ack timeout (3 s). */
const SLOW_DISK_MS = '300';

interface Model {
  attached: Set<number>;
}

interface Real {
  backend: DpuBackend;
  sim: SimProcess;
  stateFile: string;
  socket: string;
  boots: number;
  results: Map<number, DataplaneResult>;
}

function startSim(r: Real): SimProcess {
  return SimProcess.start({
    socket: r.socket,
    agentId: AGENT,
    bootId: `boot-${r.boots}`,
    stateFile: r.stateFile,
    extra: ['--state-write-delay-ms', SLOW_DISK_MS],
  });
}

const names = (m: Model): string[] => [...m.attached].map((i) => spec(i).key).sort();

/** Until the daemon's session is this simulator's and both ends count its snapshot as applied. */
async function resynced(r: Real): Promise<void> {
  await waitUntil(
    async () => {
      const h = await r.backend.health();
      const st = r.sim.state();
      return (
        h.details?.synced === true &&
        st !== undefined &&
        st.pid === r.sim.child.pid &&
        st.synced &&
        st.session.sessionId === h.details.sessionId
      );
    },
    'the restarted agent resynced',
    15_000,
  );
}

/** The simulator's table as its state file shows it, once the slow disk has caught up with `m`. */
async function heldPorts(r: Real, m: Model): Promise<string[]> {
  const want = names(m).join();
  const until = Date.now() + 3000;
  let held: string[] = [];
  while (Date.now() < until) {
    held = (r.sim.state()?.ports ?? []).map((p) => p.name).sort();
    if (held.join() === want) break;
    await new Promise((res) => setTimeout(res, 25));
  }
  return held;
}

class Attach implements fc.AsyncCommand<Model, Real> {
  constructor(readonly i: number) {}
  check = (m: Readonly<Model>): boolean => !m.attached.has(this.i);
  async run(m: Model, r: Real): Promise<void> {
    r.results.set(this.i, await attachTo(r.backend, spec(this.i)));
    m.attached.add(this.i);
  }
  toString = (): string => `attach w${this.i}`;
}

class Detach implements fc.AsyncCommand<Model, Real> {
  constructor(readonly i: number) {}
  check = (m: Readonly<Model>): boolean => m.attached.has(this.i);
  async run(m: Model, r: Real): Promise<void> {
    await r.backend.detach(view(spec(this.i), r.results.get(this.i)));
    m.attached.delete(this.i);
  }
  toString = (): string => `detach w${this.i}`;
}

/** Lets the slow disk catch up, so that a later SIGKILL finds the last change on it. */
class Settle implements fc.AsyncCommand<Model, Real> {
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    await heldPorts(r, m);
  }
  toString = (): string => 'settle';
}

/** SIGKILLs the agent and starts it again, keeping its boot (and state file) or with a new one. */
class Restart implements fc.AsyncCommand<Model, Real> {
  constructor(readonly sameBoot: boolean) {}
  check = (): boolean => true;
  async run(m: Model, r: Real): Promise<void> {
    await restartAndCheck(m, r, this.sameBoot);
  }
  toString = (): string => `SIGKILL, restart with ${this.sameBoot ? 'the same' : 'a new'} boot`;
}

async function restartAndCheck(m: Model, r: Real, sameBoot: boolean): Promise<void> {
  await r.sim.stop('SIGKILL');
  if (!sameBoot) r.boots += 1;
  r.sim = startSim(r);
  await resynced(r);
  expect(await heldPorts(r, m), `after a restart with ${sameBoot ? 'the same' : 'a new'} boot`).to.deep.equal(
    names(m),
  );
}

describe('DPU agent restarted with the same boot while snapshots keep unlisted ports', function () {
  this.timeout(300_000);
  const dirs: string[] = [];
  let real: Real | undefined;

  afterEach(async () => {
    await real?.sim.stop('SIGKILL');
    await real?.backend.stop();
    real = undefined;
    for (const d of dirs.splice(0)) removeDir(d);
  });

  /** A daemon with a new store (its snapshots keep unlisted ports) and the simulator on a slow disk. */
  async function setUp(): Promise<Real> {
    await real?.sim.stop('SIGKILL');
    await real?.backend.stop();
    const dir = scratchDir();
    dirs.push(dir);
    // Heartbeats a second apart: the agent takes three silent intervals for a dead daemon, and this
    // daemon runs in the test's own process, which a loaded machine can stall for more than 600 ms.
    const backend = await startBackend(dir, { heartbeatIntervalMs: 1000 }, false);
    await backend.reconcile([], { storeIsNew: true });
    const r: Real = {
      backend,
      socket: path.join(dir, 'agent.sock'),
      stateFile: path.join(dir, `${AGENT}.json`),
      boots: 1,
      results: new Map(),
      sim: undefined as unknown as SimProcess,
    };
    r.sim = startSim(r);
    real = r;
    await resynced(r);
    return r;
  }

  it('does not bring back a port whose Delete it acked just before it was killed', async () => {
    const r = await setUp();
    const m: Model = { attached: new Set() };
    await new Attach(1).run(m, r);
    await new Settle().run(m, r);
    expect(await heldPorts(r, m)).to.deep.equal(['w1/eth0']);
    await new Detach(1).run(m, r);
    await restartAndCheck(m, r, true);
  });

  it('holds exactly the attached ports after every restart, whatever the order of changes and kills', async () => {
    const port = fc.integer({ min: 1, max: 2 });
    const commands = fc.commands(
      [
        // Changes come twice as often as the rest, so that most runs kill the agent between them.
        port.map((i) => new Attach(i)),
        port.map((i) => new Attach(i)),
        port.map((i) => new Detach(i)),
        port.map((i) => new Detach(i)),
        fc.constant(new Settle()),
        fc.boolean().map((same) => new Restart(same)),
      ],
      { maxCommands: 6 },
    );
    await fc.assert(
      fc.asyncProperty(commands, async (cmds) => {
        const r = await setUp();
        const m: Model = { attached: new Set() };
        await fc.asyncModelRun(() => ({ model: m, real: r }), cmds);
        // Whatever came last, a SIGKILL now must not bring anything back either.
        await restartAndCheck(m, r, true);
      }),
      // Real processes make shrinking slow; the failing sequence is printed as it is.
      { numRuns: 10, seed: 20261201, endOnFailure: true },
    );
  });
});
