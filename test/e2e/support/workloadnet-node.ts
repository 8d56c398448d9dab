import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { CLI, DaemonProcess } from '../../support/daemon-process';
import { addNodeUplink } from '../../support/netns';
import { ContainerdHarness } from './containerd';
import { addNetns, deleteNetns, uniqueNetnsName } from './netns';
import { installReferencePlugins } from './reference-plugins';

// A whole test "node": a node namespace with an uplink and default route, the workloadnet daemon inside
// it, the CNI forwarder and conflist installed with `workloadnet install-cni` (as an operator would),
// and a real containerd in the same namespace calling it.

export interface WorkloadnetNodeOptions {
  podCidr: string;
  /** Extra daemon flags (backend selection and its options), possibly placed in the node's folder. */
  daemonArgs?: string[] | ((ctx: { work: string }) => string[]);
  /** Started after the node namespace exists and before the daemon (e.g. a DPU agent's namespace). */
  beforeDaemon?: (ctx: { nodeNetns: string; work: string }) => Promise<void>;
  /** Undoes beforeDaemon, after the daemon has stopped. */
  afterStop?: () => Promise<void>;
  /** Reference plugins to chain after workloadnet (install-cni --chain), copied into the bin folder. */
  chain?: string[];
}

/** Installs the forwarder and a conflist the way operators do: with `workloadnet install-cni`. */
export function installWorkloadnetCni(
  binDir: string,
  confDir: string,
  cniSocket: string,
  name: string,
  chain: string[] = [],
): void {
  execFileSync(process.execPath, [
    CLI,
    'install-cni',
    '--bin-dir',
    binDir,
    '--conf-dir',
    confDir,
    '--cni-socket',
    cniSocket,
    '--name',
    name,
    ...(chain.length > 0 ? ['--chain', chain.join(',')] : []),
  ]);
}

export class WorkloadnetNode {
  daemon!: DaemonProcess;
  containerd!: ContainerdHarness;
  readonly nodeNetns = uniqueNetnsName('wne-', 'node');
  work = '';

  constructor(private readonly opts: WorkloadnetNodeOptions) {}

  get daemonDir(): string {
    return path.join(this.work, 'daemon');
  }

  async start(): Promise<void> {
    await addNetns(this.nodeNetns);
    this.work = await mkdtemp(path.join(os.tmpdir(), 'wne-wn-'));
    addNodeUplink(this.nodeNetns, '10.250.0.1');
    await this.opts.beforeDaemon?.({ nodeNetns: this.nodeNetns, work: this.work });
    await this.startDaemon();
    const cniBinDir = path.join(this.work, 'bin');
    const cniConfDir = path.join(this.work, 'conf');
    await installReferencePlugins(cniBinDir, ['loopback', ...(this.opts.chain ?? [])]);
    installWorkloadnetCni(cniBinDir, cniConfDir, this.daemon.cniSocket, 'wn-e2e', this.opts.chain);
    this.containerd = await ContainerdHarness.start({ cniBinDir, cniConfDir, nodeNetns: this.nodeNetns });
    await this.containerd.waitForNetworkReady();
  }

  async startDaemon(): Promise<void> {
    const extra =
      typeof this.opts.daemonArgs === 'function'
        ? this.opts.daemonArgs({ work: this.work })
        : (this.opts.daemonArgs ?? []);
    this.daemon = await DaemonProcess.start({
      dir: this.daemonDir,
      netns: this.nodeNetns,
      args: ['--pod-cidr', this.opts.podCidr, ...extra],
    });
    // Pods are only started once the daemon says it can attach (a DPU backend waits for its agent).
    const client = this.daemon.client;
    const deadline = Date.now() + 15_000;
    while (!(await client.status()).ready) {
      if (Date.now() > deadline) throw new Error(`daemon not ready after 15 s:\n${this.daemon.log()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async restartDaemonAfterSigkill(): Promise<void> {
    await this.daemon.kill('SIGKILL');
    await this.startDaemon();
  }

  async stop(): Promise<void> {
    try {
      await this.containerd?.stop();
    } finally {
      await this.daemon?.stop().catch(() => undefined);
      await this.opts.afterStop?.();
      await deleteNetns(this.nodeNetns);
      if (this.work && existsSync(this.work)) await rm(this.work, { recursive: true, force: true });
    }
  }
}
