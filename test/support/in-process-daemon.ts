import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ContainerModule } from 'inversify';
import { ApiClient } from '../../cli/api-client';
import { BACKEND, type Backend } from '../../core/backend';
import { DEFAULT_CONFIG, mergeConfig, type ConfigOverrides, type DaemonConfig } from '../../core/config';
import { createContainer } from '../../core/container';
import { Daemon } from '../../core/daemon';
import { silentLogger } from '../../core/logger';
import { Metrics } from '../../core/metrics';

/**
 * A daemon in the test process with the test's backend loaded as its backend module, serving the real
 * gRPC API on a temporary unix socket.
 */
export class InProcessDaemon {
  readonly client: ApiClient;

  private constructor(
    readonly daemon: Daemon,
    readonly config: DaemonConfig,
    readonly metrics: Metrics,
  ) {
    this.client = new ApiClient(config.socket, 10_000);
  }

  static tempDir(): string {
    return fs.mkdtempSync(path.join(os.tmpdir(), 'wn-test-'));
  }

  static async start(
    backend: Backend,
    overrides: ConfigOverrides = {},
    dir = InProcessDaemon.tempDir(),
  ): Promise<InProcessDaemon> {
    const config = mergeConfig(DEFAULT_CONFIG, {
      socket: path.join(dir, 'api.sock'),
      cniSocket: path.join(dir, 'cni.sock'),
      stateDir: path.join(dir, 'state'),
      podCidrs: ['10.77.0.0/24'],
      ...overrides,
    });
    const metrics = new Metrics();
    const container = createContainer(config, silentLogger(), metrics);
    container.load(new ContainerModule((bind) => void bind<Backend>(BACKEND).toConstantValue(backend)));
    const daemon = new Daemon(container);
    await daemon.start();
    return new InProcessDaemon(daemon, config, metrics);
  }

  get dir(): string {
    return path.dirname(this.config.socket);
  }

  async stop(): Promise<void> {
    this.client.close();
    await this.daemon.stop();
  }
}
