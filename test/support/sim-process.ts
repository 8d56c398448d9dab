import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { readStateFile, type SimState } from '../../backends/dpu-sim/state-file';

// The simulator as the daemon meets it: a separate node process started from the compiled executable,
// observed only through its state file, its stderr and its exit code.

export const SIM_MAIN = path.resolve(__dirname, '../../backends/dpu-sim/main.js');

export interface SimStartOptions {
  socket?: string;
  controller?: string;
  agentId: string;
  bootId?: string;
  stateFile: string;
  extra?: string[];
  /** Run the process inside this named netns (ip netns exec). */
  netns?: string;
}

export class SimProcess {
  private stderrText = '';
  readonly exited: Promise<number | null>;
  private exitCode: number | null | undefined;

  private constructor(
    readonly child: ChildProcess,
    readonly stateFile: string,
  ) {
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => {
      this.stderrText += d;
      if (process.env.DPU_SIM_LOG) process.stderr.write(d);
    });
    this.exited = new Promise((resolve) =>
      child.on('exit', (code) => {
        this.exitCode = code;
        resolve(code);
      }),
    );
  }

  static start(o: SimStartOptions): SimProcess {
    const args = [
      SIM_MAIN,
      '--controller',
      o.controller ?? `unix:${o.socket}`,
      '--agent-id',
      o.agentId,
      '--state-file',
      o.stateFile,
      '--backoff-max-ms',
      '200',
      '--log-level',
      'debug',
      ...(o.bootId ? ['--boot-id', o.bootId] : []),
      ...(o.extra ?? []),
    ];
    const [cmd, argv] = o.netns
      ? ['ip', ['netns', 'exec', o.netns, process.execPath, ...args]]
      : [process.execPath, args];
    const child = spawn(cmd, argv as string[], { stdio: ['ignore', 'ignore', 'pipe'] });
    return new SimProcess(child, o.stateFile);
  }

  get stderr(): string {
    return this.stderrText;
  }

  get running(): boolean {
    return this.exitCode === undefined;
  }

  state(): SimState | undefined {
    try {
      // The file with its journal (state-file.ts): the file alone may be behind.
      return readStateFile(this.stateFile);
    } catch {
      return undefined;
    }
  }

  /** Polls the state file until `pred` holds; fails with the last state and the sim's log otherwise. */
  async waitForState(pred: (s: SimState) => boolean, what: string, timeoutMs = 10_000): Promise<SimState> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const s = this.state();
      // A state file left by an earlier process of the same test says nothing about this one.
      if (s && s.pid === this.child.pid && pred(s)) return s;
      if (Date.now() > until) {
        throw new Error(
          `simulator never reached "${what}" in ${timeoutMs} ms; state: ${JSON.stringify(s)?.slice(0, 2000)}\nlog tail:\n${this.stderrText.slice(-3000)}`,
        );
      }
      if (!this.running)
        throw new Error(
          `simulator exited (${this.exitCode}) before "${what}"\nlog tail:\n${this.stderrText.slice(-3000)}`,
        );
      await sleep(20);
    }
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    if (this.running) this.child.kill(signal);
    return this.exited;
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export { waitUntil } from './wait-until';
