import * as path from 'node:path';
import type { FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { SimState } from '../../backends/dpu-sim/state-file';
import type { FabricTopology, NodeSpec } from './fabric-topology';
import { netnsPath } from './netns';
import { SimProcess } from './sim-process';

// A simulated DPU on the fabric's underlay: a namespace of its own with an uplink on its node's subnet
// (the uplink's address is its VTEP), and the simulator as a real process in netns mode, which plugs the
// node's pods into the host's namespace and carries the overlay on a kernel VXLAN device of its own.
// Its own file because every DPU fabric test, whether a daemon or the backend in process drives the
// DPU, starts, kills and brings back its DPUs the same way.

/** The simulator's arguments for its netns dataplane: its DPU's namespace, and the host's it plugs into. */
export function netnsDataplane(dpuNs: string, hostNsPath: string): string[] {
  return ['--dataplane', 'netns', '--dpu-netns', dpuNs, '--host-netns', hostNsPath];
}

export interface DpuSpec {
  /** The DPU's name: its agent id, and its namespace's. */
  name: string;
  /** Its uplink's host number on the node's subnet. */
  host: number;
  /** Simulator arguments for every start of it (`--keep-vfs`, a log level). */
  extra?: string[];
}

/** Where a DPU plugs in: its node's namespace, and the directory holding the node's agent socket. */
export interface DpuHost {
  ns: string;
  dir: string;
}

export class SimulatedDpu {
  /** The running simulator; undefined before the first start. */
  sim?: SimProcess;
  /** The socket the node's daemon (or backend) serves its agents on. */
  readonly socket: string;
  readonly stateFile: string;

  private constructor(
    readonly spec: DpuSpec,
    /** Its namespace, and its uplink's address (its VTEP). */
    readonly ns: string,
    readonly address: string,
    readonly host: DpuHost,
  ) {
    this.socket = path.join(host.dir, 'agent.sock');
    this.stateFile = path.join(host.dir, `${spec.name}.json`);
  }

  get name(): string {
    return this.spec.name;
  }

  /** Adds the DPU's namespace to the underlay, on `subnet`, for the node `host`; starts nothing. */
  static async add(
    topo: FabricTopology,
    subnet: NodeSpec['subnet'],
    spec: DpuSpec,
    host: DpuHost,
  ): Promise<SimulatedDpu> {
    const bare = await topo.addBareNode({ name: spec.name, subnet, host: spec.host });
    return new SimulatedDpu(spec, bare.ns, bare.address, host);
  }

  /** Starts the simulator (a new process; a new boot id is a reboot), with `extra` over the spec's. */
  start(bootId = `boot-${this.name}`, extra = this.spec.extra ?? []): SimProcess {
    this.sim = SimProcess.start({
      socket: this.socket,
      agentId: this.name,
      bootId,
      stateFile: this.stateFile,
      extra: [...netnsDataplane(this.ns, netnsPath(this.host.ns)), ...extra],
    });
    return this.sim;
  }

  /** Starts the simulator and waits until its session is connected and synced. */
  async connect(bootId?: string, extra?: string[], timeoutMs?: number): Promise<SimState> {
    return this.start(bootId, extra).waitForState(
      (s) => s.session.state === 'connected' && s.synced,
      `${this.name} connected`,
      timeoutMs,
    );
  }

  /** The fabric objects the DPU holds, by its state file. */
  objects(): FabricObject[] {
    return this.sim?.state()?.fabric ?? [];
  }

  /** Stops the simulator (SIGKILL unless told: a DPU's agent is not asked) and waits until it exited. */
  async stop(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await this.sim?.stop(signal);
  }
}
