import type { Container } from 'inversify';
import { ApiServer } from './api-server';
import { BACKEND, type Backend } from './backend';
import { CONFIG, type DaemonConfig } from './config';
import { LOGGER, type Logger } from './logger';
import { STORE, type Orchestrator } from './orchestrator';
import { POOL_SUPPLY, type PoolSupply } from './pool-supply';
import { prepareSocketPath } from './unix-socket';
import type { Store } from './store';
import { WORKLOAD_SERVICE } from './workload-service';

/** Something else the daemon serves besides the gRPC API (the CNI endpoint, metrics). */
export interface Endpoint {
  name: string;
  listen(): Promise<void>;
  close(): Promise<void>;
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
    await this.container.get<PoolSupply>(POOL_SUPPLY).start();
    const service = this.service;
    await service.init();
    this.api = new ApiServer(service, log);
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

  async stop(): Promise<void> {
    clearInterval(this.readyTimer);
    for (const ep of this.endpoints.reverse()) await ep.close().catch(() => undefined);
    await this.api?.close();
    await this.container.get<PoolSupply>(POOL_SUPPLY).stop();
    await this.container.get<Backend>(BACKEND).stop();
    await this.container.get<Store>(STORE).close();
  }
}
