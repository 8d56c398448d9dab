import type { Container } from 'inversify';
import { ApiServer } from './api-server';
import { BACKEND, type Backend } from './backend';
import { CONFIG, type DaemonConfig } from './config';
import { LOGGER, type Logger } from './logger';
import { STORE, type Orchestrator } from './orchestrator';
import { prepareSocketPath } from './unix-socket';
import type { Store } from './store';
import { WORKLOAD_SERVICE } from './workload-service';

/** Something else the daemon serves besides the gRPC API (the CNI endpoint, metrics). */
export interface Endpoint {
  name: string;
  listen(): Promise<void>;
  /** Stops accepting; calls in flight may finish within `graceMs`, then every connection is closed. */
  close(graceMs?: number): Promise<void>;
}

/**
 * The daemon's lifecycle: backend start, store + reconcile, then the API; torn down in reverse order.
 * Extra endpoints are created from the orchestrator once it is ready.
 */
export class Daemon {
  private readonly endpoints: Endpoint[] = [];
  private api?: ApiServer;
  private readyTimer?: NodeJS.Timeout;

  constructor(private readonly container: Container) {}

  get service(): Orchestrator {
    return this.container.get<Orchestrator>(WORKLOAD_SERVICE);
  }

  async start(extra: (service: Orchestrator) => Endpoint[] = () => []): Promise<void> {
    const config = this.container.get<DaemonConfig>(CONFIG);
    const log = this.container.get<Logger>(LOGGER);
    // Refuse to run beside a live daemon before touching anything: its backend would take our
    // in-flight attachments for orphans.
    await prepareSocketPath(config.socket);
    const backend = this.container.get<Backend>(BACKEND);
    await backend.start();
    const service = this.service;
    await service.init();
    this.api = new ApiServer(service, log, {
      maxConnections: config.apiMaxConnections,
      idleTimeoutMs: config.apiIdleTimeoutMs,
    });
    await this.api.listen(config.socket, config.socketGroup);
    for (const ep of extra(service)) {
      await ep.listen();
      this.endpoints.push(ep);
    }
    await this.refreshServing();
    // Health clients see readiness changes (pool exhausted, agent lost) without calling Status.
    this.readyTimer = setInterval(() => void this.refreshServing(), 2000).unref();
    log.info({ socket: config.socket, backend: backend.name, pools: config.podCidrs }, 'workloadnetd ready');
  }

  private async refreshServing(): Promise<void> {
    const st = await this.service.status().catch(() => undefined);
    this.api?.setServing(st?.ready ?? false);
  }

  /**
   * Stops accepting on every endpoint at once, lets calls in flight finish for up to `graceMs` (the
   * configured shutdownTimeoutMs), closes every connection, then stops the backend and the store.
   */
  async stop(graceMs = this.container.get<DaemonConfig>(CONFIG).shutdownTimeoutMs): Promise<void> {
    clearInterval(this.readyTimer);
    await Promise.all([
      ...this.endpoints.reverse().map((ep) => ep.close(graceMs).catch(() => undefined)),
      this.api?.close(graceMs),
    ]);
    await this.container.get<Backend>(BACKEND).stop();
    await this.container.get<Store>(STORE).close();
  }
}
