import * as fs from 'node:fs';
import * as path from 'node:path';
import type { DpuBackend } from '../../backends/dpu';
import type { TestSpec } from './attach-spec';
import { removeDir, scratchDir, spec, startBackend } from './dpu-fixtures';
import { NetnsSet, type TestNamespace } from './netns';
import { SimProcess } from './sim-process';
import { netnsDataplane } from './simulated-dpu';

// The DPU offload with real interfaces, fresh for each test of a suite: a node namespace (the host
// side) with the DPU backend in this process, a namespace standing for the DPU with the simulator as a
// real process in netns mode, and workload namespaces the test adds. Everything goes after the test.

export class NetnsDpuRig {
  dir = '';
  node: TestNamespace = { name: '', path: '' };
  dpu: TestNamespace = { name: '', path: '' };
  backend: DpuBackend | undefined;
  sim: SimProcess | undefined;
  private readonly nets: NetnsSet;

  /**
   * Registers the suite's hooks: node, DPU, backend and a connected simulator before each test. The
   * simulator runs as `agentId`, first under `bootId` when given (a random one otherwise).
   */
  constructor(
    prefix: string,
    private readonly agentId: string,
    bootId?: string,
  ) {
    this.nets = new NetnsSet(prefix);
    beforeEach(async () => {
      this.dir = scratchDir();
      this.node = this.nets.add();
      this.dpu = this.nets.add();
      this.backend = await startBackend(this.dir, { hostNetnsPath: this.node.path });
      this.sim = await this.startSim(bootId);
    });
    afterEach(async () => {
      await this.sim?.stop('SIGKILL');
      await this.backend?.stop();
      this.backend = undefined;
      this.nets.cleanup();
      removeDir(this.dir);
    });
  }

  /** A new workload namespace, removed with the rest after the test. */
  workload(): TestNamespace {
    return this.nets.add();
  }

  /** The spec of workload `i` in `ns`, as an attach would give it. */
  workloadSpec(i: number, ns: TestNamespace): TestSpec {
    return spec(i, { netnsPath: ns.path, netnsInode: fs.statSync(ns.path).ino });
  }

  /** Starts the simulator (a new boot id is a reboot) and waits until it is connected and synced. */
  async startSim(bootId?: string): Promise<SimProcess> {
    const s = SimProcess.start({
      socket: path.join(this.dir, 'agent.sock'),
      agentId: this.agentId,
      bootId,
      stateFile: path.join(this.dir, 'sim.json'),
      extra: netnsDataplane(this.dpu.name, this.node.path),
    });
    await s.waitForState((x) => x.session.state === 'connected' && x.synced, 'connected');
    return s;
  }
}
