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
  /**
   * Daemon flags by name, without the dashes (`{ 'pod-cidr': '10.0.0.0/24' }`). They override the
   * defaults: --socket, --cni-socket and --state-dir in `dir`, --log-level debug.
   */
  flags?: Record<string, string>;
  /** Arguments after the flags, as given. */
  args?: string[];
  /** A config file's contents: start and launch write it to `dir`/config.json, given as --config. */
  config?: object;
  /**
   * A command the daemon is started through, inside `netns`, that execs its arguments in place (so that
   * the child pid stays the daemon's): e.g. `unshare -m …` to give it another view of the file system.
   */
  wrap?: string[];
}

/** The daemon's flags for `opts`: its defaults with the caller's over them. */
function daemonFlags(
  opts: DaemonProcessOptions,
): Record<string, string> & { socket: string; 'cni-socket': string } {
  return {
    socket: path.join(opts.dir, 'api.sock'),
    'cni-socket': path.join(opts.dir, 'cni.sock'),
    'state-dir': path.join(opts.dir, 'state'),
    'log-level': 'debug',
    ...(opts.config ? { config: path.join(opts.dir, 'config.json') } : {}),
    ...opts.flags,
  };
}

/**
 * The command line that runs the daemon `opts` describes (inside `opts.netns` when given), for tests
 * that run it their own way: to completion, or killed in the middle of its start-up.
 */
export function daemonCommand(opts: DaemonProcessOptions): { file: string; args: string[] } {
  const flags = Object.entries(daemonFlags(opts)).flatMap(([name, value]) => [`--${name}`, value]);
  const daemon = [...(opts.wrap ?? []), process.execPath, CLI, 'daemon', ...flags, ...(opts.args ?? [])];
  if (opts.netns) return { file: 'ip', args: ['netns', 'exec', opts.netns, ...daemon] };
  const [file = process.execPath, ...args] = daemon;
  return { file, args };
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
    return daemonFlags(this.opts).socket;
  }
  get cniSocket(): string {
    return daemonFlags(this.opts)['cni-socket'];
  }
  get logFile(): string {
    return path.join(this.opts.dir, 'daemon.log');
  }

  /** Starts the daemon and waits until its API answers. */
  static async start(opts: DaemonProcessOptions): Promise<DaemonProcess> {
    const d = DaemonProcess.launch(opts);
    await d.waitReady();
    return d;
  }

  /** Starts the daemon without waiting for it: the test may kill it while it starts up. */
  static launch(opts: DaemonProcessOptions): DaemonProcess {
    fs.mkdirSync(opts.dir, { recursive: true });
    if (opts.config) fs.writeFileSync(path.join(opts.dir, 'config.json'), JSON.stringify(opts.config));
    const { file, args } = daemonCommand(opts);
    const log = fs.openSync(path.join(opts.dir, 'daemon.log'), 'a');
    const child = spawn(file, args, { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    return new DaemonProcess(child, opts);
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
          const ok = await probe.status().then(
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
