import type { Container } from 'inversify';
import { ApiServer } from './api-server';
import { BACKEND, type Backend } from './backend';
import { CONFIG, type DaemonConfig } from './config';
import { ENDPOINT, startAll, type Lifecycle } from './lifecycle';
import { LOGGER, type Logger } from './logger';
import { STORE, type Orchestrator } from './orchestrator';
import { prepareSocketPath } from './unix-socket';
import type { Store } from './store';
import { WORKLOAD_SERVICE } from './workload-service';

/**
 * The daemon: its parts, started in this order and stopped in reverse. The socket guard comes first
 * (refuse to run beside a live daemon before touching anything: its backend would take our in-flight
 * attachments for orphans), then the backend, the store and reconcile, the API, and the endpoints
 * bound under ENDPOINT (the CNI endpoint, metrics).
 */
export class Daemon {
  private stopAll?: () => Promise<void>;
  private readyTimer?: NodeJS.Timeout;

  constructor(private readonly container: Container) {}

  get service(): Orchestrator {
    return this.container.get<Orchestrator>(WORKLOAD_SERVICE);
  }

  async start(): Promise<void> {
    const config = this.container.get<DaemonConfig>(CONFIG);
    const log = this.container.get<Logger>(LOGGER);
    let api: ApiServer | undefined;
    const parts: Lifecycle[] = [
      { name: 'socket guard', start: () => prepareSocketPath(config.socket), stop: async () => undefined },
      lazy('backend', () => this.container.get<Backend>(BACKEND)),
      {
        name: 'store and reconcile',
        start: async () => void (await this.service.init()),
        stop: () => this.container.get<Store>(STORE).close(),
      },
      {
        name: 'api',
        start: () => (api = new ApiServer(this.service, log)).listen(config.socket, config.socketGroup),
        stop: () => api?.close() ?? Promise.resolve(),
      },
      ...(this.container.isBound(ENDPOINT) ? this.container.getAll<Lifecycle>(ENDPOINT) : []),
    ];
    this.stopAll = await startAll(parts, (part, err) =>
      log.warn({ part, err: (err as Error).message }, 'stopping a part failed'),
    );
    const ready = async (): Promise<void> => {
      const st = await this.service.status().catch(() => undefined);
      api?.setServing(st?.ready ?? false);
    };
    await ready();
    // Health clients see readiness changes (pool exhausted, agent lost) without calling Status.
    this.readyTimer = setInterval(() => void ready(), 2000).unref();
    log.info(
      { socket: config.socket, backend: this.container.get<Backend>(BACKEND).name, pools: config.podCidrs },
      'workloadnetd ready',
    );
  }

  async stop(): Promise<void> {
    clearInterval(this.readyTimer);
    await this.stopAll?.();
    this.stopAll = undefined;
  }
}

/** A part resolved from the container only when it starts (building a backend may already fail). */
function lazy(name: string, get: () => Lifecycle): Lifecycle {
  let part: Lifecycle | undefined;
  return {
    name,
    start: () => (part = get()).start(),
    stop: () => part?.stop() ?? Promise.resolve(),
  };
}
