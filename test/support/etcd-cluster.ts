import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Etcd3 } from 'etcd3';
import { addNetns, delNetns, uniqueName } from './netns';
import { requireProgram } from './system-program';

// A real etcd cluster (Debian's etcd-server) of several members on the loopback of a test-owned
// network namespace. Members can be killed and started again with their data, like a real outage.

export const ETCD_BIN = '/usr/bin/etcd';
export const haveEtcd = fs.existsSync(ETCD_BIN);

interface Member {
  name: string;
  clientPort: number;
  peerPort: number;
  dataDir: string;
  child?: ChildProcess;
  exited?: Promise<void>;
}

export class EtcdCluster {
  readonly netns: string;
  private readonly members: Member[];

  private constructor(
    readonly dir: string,
    size: number,
    prefix: string,
  ) {
    this.netns = uniqueName(prefix);
    this.members = Array.from({ length: size }, (_, i) => ({
      name: `m${i}`,
      clientPort: 2379 + i * 10,
      peerPort: 2380 + i * 10,
      dataDir: path.join(dir, `m${i}`),
    }));
  }

  /** Creates the namespace (lo up) and starts every member; resolves when the cluster answers. */
  static async start(dir: string, size = 3, prefix = 'wn-pools-'): Promise<EtcdCluster> {
    fs.mkdirSync(dir, { recursive: true });
    const c = new EtcdCluster(dir, size, prefix);
    addNetns(c.netns);
    try {
      execFileSync('ip', ['-n', c.netns, 'link', 'set', 'lo', 'up']);
      for (let i = 0; i < size; i++) c.startMember(i, 'new');
      await c.waitHealthy();
    } catch (err) {
      await c.stop();
      throw err;
    }
    return c;
  }

  get endpoints(): string[] {
    return this.members.map((m) => `http://127.0.0.1:${m.clientPort}`);
  }

  get netnsPath(): string {
    return `/var/run/netns/${this.netns}`;
  }

  private startMember(i: number, state: 'new' | 'existing'): void {
    requireProgram(ETCD_BIN);
    const m = this.members[i]!;
    const initialCluster = this.members.map((x) => `${x.name}=http://127.0.0.1:${x.peerPort}`).join(',');
    const args = [
      'netns',
      'exec',
      this.netns,
      ETCD_BIN,
      '--name',
      m.name,
      '--data-dir',
      m.dataDir,
      // The unix socket (a file, reachable from every namespace) lets the test process itself talk to
      // the cluster, which otherwise lives on the namespace's loopback only.
      '--listen-client-urls',
      `http://127.0.0.1:${m.clientPort},unix://${m.name}.sock:0`,
      '--advertise-client-urls',
      `http://127.0.0.1:${m.clientPort}`,
      '--listen-peer-urls',
      `http://127.0.0.1:${m.peerPort}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${m.peerPort}`,
      '--initial-cluster',
      initialCluster,
      '--initial-cluster-state',
      state,
      '--initial-cluster-token',
      this.netns,
      // Short election timings: a lost leader is replaced within a second.
      '--heartbeat-interval',
      '50',
      '--election-timeout',
      '500',
      '--log-level',
      'warn',
    ];
    // A killed member leaves its socket file behind, and etcd refuses to bind over it.
    fs.rmSync(path.join(this.dir, `${m.name}.sock:0`), { force: true });
    const log = fs.openSync(path.join(this.dir, `${m.name}.log`), 'a');
    const child = spawn('ip', args, { stdio: ['ignore', log, log], cwd: this.dir });
    fs.closeSync(log);
    m.child = child;
    m.exited = new Promise((resolve) => child.once('exit', () => resolve()));
  }

  /** SIGKILLs one member (its data stays for a restart). */
  async kill(i: number): Promise<void> {
    const m = this.members[i]!;
    if (!m.child) return;
    m.child.kill('SIGKILL');
    await m.exited;
    m.child = undefined;
  }

  async killAll(): Promise<void> {
    for (let i = 0; i < this.members.length; i++) await this.kill(i);
  }

  /** Starts a killed member again with its data. */
  restart(i: number): void {
    if (!this.members[i]!.child) this.startMember(i, 'existing');
  }

  async restartAll(): Promise<void> {
    for (let i = 0; i < this.members.length; i++) this.restart(i);
    await this.waitHealthy();
  }

  /** Endpoints the test process can reach (the members' unix sockets). */
  get localEndpoints(): string[] {
    return this.members.map((m) => `unix://${path.join(this.dir, m.name)}.sock:0`);
  }

  /** A client of the cluster for the test process. */
  client(): Etcd3 {
    return new Etcd3({ hosts: this.localEndpoints });
  }

  /** Waits until a quorum write goes through. */
  async waitHealthy(timeoutMs = 20_000): Promise<void> {
    requireProgram('etcdctl');
    const deadline = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < deadline) {
      try {
        execFileSync(
          'ip',
          [
            'netns',
            'exec',
            this.netns,
            'etcdctl',
            '--endpoints',
            this.endpoints.join(','),
            '--command-timeout=1s',
            'put',
            '/health-probe',
            'x',
          ],
          { stdio: 'pipe', env: { ...process.env, ETCDCTL_API: '3' } },
        );
        return;
      } catch (err) {
        last = String((err as { stderr?: Buffer }).stderr ?? err);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`etcd cluster not healthy within ${timeoutMs} ms: ${last}\n${this.logs()}`);
  }

  /** etcdctl inside the namespace, returning stdout. */
  etcdctl(...args: string[]): string {
    requireProgram('etcdctl');
    return execFileSync(
      'ip',
      ['netns', 'exec', this.netns, 'etcdctl', '--endpoints', this.endpoints.join(','), ...args],
      {
        encoding: 'utf8',
        env: { ...process.env, ETCDCTL_API: '3' },
      },
    );
  }

  /** The cluster's current revision (every write to any key increments it). */
  async revision(): Promise<number> {
    const c = this.client();
    try {
      const res = await c.get('/revision-probe').exec();
      return Number(res.header.revision);
    } finally {
      c.close();
    }
  }

  logs(): string {
    return this.members
      .map((m) => {
        try {
          return `${m.name}:\n${fs
            .readFileSync(path.join(this.dir, `${m.name}.log`), 'utf8')
            .split('\n')
            .slice(-10)
            .join('\n')}`;
        } catch {
          return `${m.name}: (no log)`;
        }
      })
      .join('\n');
  }

  async stop(): Promise<void> {
    await this.killAll();
    delNetns(this.netns);
  }
}
