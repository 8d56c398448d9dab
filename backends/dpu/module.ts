import * as os from 'node:os';
import { ContainerModule } from 'inversify';
import { BACKEND, type Backend } from '../../core/backend';
import type { DaemonConfig } from '../../core/config';
import type { Logger } from '../../core/logger';
import { STORE, type Store } from '../../core/store/store';
import { DpuBackend } from './dpu-backend';

/** The DPU backend as the daemon loads it: BACKEND, built from the daemon's config. */
export function dpuBackendModule(config: DaemonConfig, logger: Logger): ContainerModule {
  return new ContainerModule((bind) => {
    bind<Backend>(BACKEND).toDynamicValue((ctx) => {
      const backend = new DpuBackend({
        agentSocket: config.dpu.agentSocket,
        agentListen: config.dpu.agentListen || undefined,
        tls: config.dpu.agentListen
          ? { cert: config.dpu.tlsCert, key: config.dpu.tlsKey, ca: config.dpu.tlsCa }
          : undefined,
        ackTimeoutMs: config.dpu.ackTimeoutMs,
        heartbeatIntervalMs: config.dpu.heartbeatIntervalMs,
        hostNetnsPath: config.linux.hostNetns || undefined,
        linuxLinkGroups: [config.linux.linkGroup, config.linux.detachGroup],
        nodeName: config.nodeName || os.hostname(),
        allowUnenforcedPolicy: config.dpu.allowUnenforcedPolicy,
        logger: logger.child({ backend: 'dpu' }),
      });
      // The store is bound by the daemon; asked for only at the first plan, after it has opened.
      backend.fabric.keepHoldersIn(() => ctx.container.get<Store>(STORE));
      return backend;
    });
  });
}
