import * as path from 'node:path';
import type { DpuBackend, DpuBackendOptions } from '../../backends/dpu';
import type { FabricSettings } from '../../core/fabric-dataplane';
import type { AgentMessage } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { removeDir, scratchDir, startBackend } from './dpu-fixtures';
import { RawAgent } from './raw-agent';

// A DPU backend for the protocol tests with hand-driven agents, made fresh for each test: a scratch
// directory, the backend listening on its agent socket (its fabric prepared when the test gives
// settings), and the agents the test connects; after the test, the agents are closed, the backend
// stopped and the directory removed.

export interface RawAgentBackendOptions {
  /** The backend's options, asked for before each test (so that a test may give a fresh logger). */
  backend?: () => Partial<DpuBackendOptions>;
  /** When given, the fabric is prepared with these before each test. */
  fabric?: FabricSettings;
}

export class RawAgentBackend {
  private current: { dir: string; backend: DpuBackend } | undefined;
  private readonly agents: RawAgent[] = [];

  get dir(): string {
    return this.now().dir;
  }

  get backend(): DpuBackend {
    return this.now().backend;
  }

  /** An agent that says `hello` and then heartbeats every `keepAliveMs`, closed after the test. */
  connect(hello: AgentMessage, keepAliveMs = 100): RawAgent {
    const a = new RawAgent(path.join(this.dir, 'agent.sock'));
    this.agents.push(a);
    a.send(hello);
    a.keepAlive(keepAliveMs);
    return a;
  }

  async start(opts: RawAgentBackendOptions): Promise<void> {
    const dir = scratchDir();
    const backend = await startBackend(dir, opts.backend?.() ?? {});
    this.current = { dir, backend };
    if (opts.fabric) await backend.fabric.prepare(opts.fabric);
  }

  async stop(): Promise<void> {
    for (const a of this.agents.splice(0)) a.close();
    const was = this.current;
    this.current = undefined;
    await was?.backend.stop();
    if (was) removeDir(was.dir);
  }

  private now(): { dir: string; backend: DpuBackend } {
    if (!this.current) throw new Error('no backend: it is made before each test');
    return this.current;
  }
}

/** A RawAgentBackend made before each test of the calling `describe` and taken down after it. */
export function rawAgentBackend(opts: RawAgentBackendOptions = {}): RawAgentBackend {
  const rig = new RawAgentBackend();
  beforeEach(() => rig.start(opts));
  afterEach(() => rig.stop());
  return rig;
}
