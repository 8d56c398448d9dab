import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ApiClient } from '../../cli/api-client';

// The real daemon as a child process (dist/cli/workloadnet.js daemon), optionally inside a test-owned
// network namespace, so tests exercise exactly what operators run, including SIGKILL and restart.

export const CLI = path.resolve(__dirname, '..', '..', 'cli', 'workloadnet.js');

export interface DaemonProcessOptions {
  /** Directory for sockets, state and the log. */
  dir: string;
  /** Test-owned namespace name to run the daemon in (via `ip netns exec`). */
  netns?: string;
  args?: string[];
}

export class DaemonProcess {
  readonly client: ApiClient;
  private exited: Promise<void>;
  private constructor(
    readonly child: ChildProcess,
    readonly opts: DaemonProcessOptions,
  ) {
    this.client = new ApiClient(this.socket, 20_000);
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
  }

  get socket(): string {
    return path.join(this.opts.dir, 'api.sock');
  }
  get cniSocket(): string {
    return path.join(this.opts.dir, 'cni.sock');
  }
  get logFile(): string {
    return path.join(this.opts.dir, 'daemon.log');
  }

  static async start(opts: DaemonProcessOptions): Promise<DaemonProcess> {
    fs.mkdirSync(opts.dir, { recursive: true });
    const args = [
      CLI,
      'daemon',
      '--socket',
      path.join(opts.dir, 'api.sock'),
      '--cni-socket',
      path.join(opts.dir, 'cni.sock'),
      '--state-dir',
      path.join(opts.dir, 'state'),
      '--log-level',
      'debug',
      ...(opts.args ?? []),
    ];
    const cmd = opts.netns ? 'ip' : process.execPath;
    const argv = opts.netns ? ['netns', 'exec', opts.netns, process.execPath, ...args] : args;
    const log = fs.openSync(path.join(opts.dir, 'daemon.log'), 'a');
    const child = spawn(cmd, argv, { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    const d = new DaemonProcess(child, opts);
    await d.waitReady();
    return d;
  }

  /**
   * Waits until the API answers Status (ready or not) past start-up (the daemon answers Status while it
   * starts, without a reconcile summary); fails with the daemon's log if it exits.
   */
  private async waitReady(timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let exited = false;
    void this.exited.then(() => (exited = true));
    const probe = new ApiClient(this.socket, 1000);
    try {
      while (Date.now() < deadline) {
        if (exited) throw new Error(`daemon exited during start-up:\n${this.log()}`);
        if (fs.existsSync(this.socket)) {
          const ok = await probe.call(probe.raw.status, {}).then(
            (st) => st.reconcile !== undefined,
            () => false,
          );
          if (ok) return;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    } finally {
      probe.close();
    }
    throw new Error(`daemon did not become reachable within ${timeoutMs} ms:\n${this.log()}`);
  }

  log(): string {
    try {
      return fs.readFileSync(this.logFile, 'utf8').split('\n').slice(-40).join('\n');
    } catch {
      return '(no log)';
    }
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    this.client.close();
    // `ip netns exec` execs the daemon in place, so the child pid is the daemon itself.
    this.child.kill(signal);
    await this.exited;
  }

  async stop(): Promise<void> {
    await this.kill('SIGTERM');
  }
}
