import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ContainerModule } from 'inversify';
import { ApiClient } from '../../cli/api-client';
import { BACKEND, type Backend } from '../../core/backend';
import { DEFAULT_CONFIG, type ConfigOverrides, type DaemonConfig } from '../../core/config';
import { mergeConfig } from '../../core/daemon/config-check';
import { createContainer } from '../../core/daemon/container';
import { Daemon } from '../../core/daemon/daemon';
import { silentLogger } from '../../core/logger';
import { Metrics } from '../../core/metrics';
import { NETNS_OPENER, type NetnsOpener } from '../../core/netns-opener';
import { staticPoolSourceModule } from '../../sources/static/module';

export interface InProcessDaemonOptions {
  /** Directory for the sockets and the state; a new temporary one by default. */
  dir?: string;
  /**
   * Opens workloads' namespaces instead of the kernel (see StandInNamespaces), for tests whose backend
   * never enters one.
   */
  netns?: NetnsOpener;
}

/**
 * A daemon in the test process with the test's backend loaded as its backend module, serving the real
 * gRPC API on a temporary unix socket. Workloads' namespaces are opened by the kernel unless the
 * options give a stand-in opener.
 */
export class InProcessDaemon {
  readonly client: ApiClient;

  private constructor(
    readonly daemon: Daemon,
    readonly config: DaemonConfig,
    readonly metrics: Metrics,
    private readonly overrides: ConfigOverrides,
    private readonly opts: InProcessDaemonOptions,
  ) {
    this.client = new ApiClient(config.socket, 10_000);
  }

  static tempDir(): string {
    return fs.mkdtempSync(path.join(os.tmpdir(), 'wn-test-'));
  }

  static async start(
    backend: Backend,
    overrides: ConfigOverrides = {},
    opts: InProcessDaemonOptions = {},
  ): Promise<InProcessDaemon> {
    const dir = opts.dir ?? InProcessDaemon.tempDir();
    const config = mergeConfig(DEFAULT_CONFIG, {
      socket: path.join(dir, 'api.sock'),
      cniSocket: path.join(dir, 'cni.sock'),
      stateDir: path.join(dir, 'state'),
      podCidrs: ['10.77.0.0/24'],
      ...overrides,
    });
    const metrics = new Metrics();
    const container = createContainer(config, silentLogger(), metrics);
    container.load(
      staticPoolSourceModule(config, silentLogger()),
      new ContainerModule((bind) => void bind<Backend>(BACKEND).toConstantValue(backend)),
    );
    if (opts.netns) container.rebind<NetnsOpener>(NETNS_OPENER).toConstantValue(opts.netns);
    const daemon = new Daemon(container);
    await daemon.start();
    return new InProcessDaemon(daemon, config, metrics, overrides, opts);
  }

  /**
   * Stops this daemon and starts another on the same directory (socket and state), configuration and
   * options, with `backend` as its dataplane: a restart, as after a crash or an upgrade.
   */
  async restart(backend: Backend): Promise<InProcessDaemon> {
    await this.stop();
    return InProcessDaemon.start(backend, this.overrides, { ...this.opts, dir: this.dir });
  }

  get dir(): string {
    return path.dirname(this.config.socket);
  }

  async stop(): Promise<void> {
    this.client.close();
    await this.daemon.stop();
  }

  /** Stops the daemon for good and removes its directory (sockets and state). */
  async dispose(): Promise<void> {
    await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
