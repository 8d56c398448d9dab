import * as path from 'node:path';
import type { DpuBackend, DpuBackendOptions } from '../../backends/dpu';
import { removeDir, scratchDir, startBackend } from './dpu-fixtures';
import { SimProcess } from './sim-process';

// The DPU backend against real simulator processes, made fresh for each test: a scratch directory with
// the agent socket in it, the backends and simulators the test starts there; after the test the
// simulators are killed, the backends stopped and the directory removed.

export class SimRig {
  private current: string | undefined;
  private readonly sims: SimProcess[] = [];
  private readonly backends: DpuBackend[] = [];

  get dir(): string {
    if (!this.current) throw new Error('no scratch directory: it is made before each test');
    return this.current;
  }

  /** The agent socket the backends listen on and the simulators dial. */
  get sock(): string {
    return path.join(this.dir, 'agent.sock');
  }

  /** A backend listening on the rig's socket (see startBackend in dpu-fixtures), stopped after the test. */
  async startBackend(opts: Partial<DpuBackendOptions> = {}, prime = true): Promise<DpuBackend> {
    const b = await startBackend(this.dir, opts, prime);
    this.backends.push(b);
    return b;
  }

  /** A simulator dialling the rig's socket, its state in `stateName` in the scratch directory. */
  sim(agentId: string, extra: string[] = [], bootId?: string, stateName = `${agentId}.json`): SimProcess {
    return this.track(
      SimProcess.start({
        socket: this.sock,
        agentId,
        bootId,
        stateFile: path.join(this.dir, stateName),
        extra,
      }),
    );
  }

  /** A simulator the test started itself, killed after the test like the rig's own. */
  track(s: SimProcess): SimProcess {
    this.sims.push(s);
    return s;
  }

  begin(): void {
    this.current = scratchDir();
  }

  async end(): Promise<void> {
    await Promise.all(this.sims.splice(0).map((s) => s.stop('SIGKILL')));
    for (const b of this.backends.splice(0)) await b.stop();
    if (this.current) removeDir(this.current);
    this.current = undefined;
  }
}

/** A SimRig set up before each test of the calling `describe` and taken down after it. */
export function simRig(): SimRig {
  const rig = new SimRig();
  beforeEach(() => rig.begin());
  afterEach(() => rig.end());
  return rig;
}
