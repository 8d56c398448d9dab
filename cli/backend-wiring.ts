import type { Container } from 'inversify';
import { DpuBackend } from '../backends/dpu/dpu-backend';
import { LinuxBackend } from '../backends/linux/linux-backend';
import { BACKEND, type Backend } from '../core/backend';
import type { DaemonConfig } from '../core/config';
import type { Logger } from '../core/logger';
import { mayServeIpv6 } from './pool-source-wiring';

// The one module that knows every backend: it binds the configured one. Tests bind their own instead.

export function bindBackend(container: Container, config: DaemonConfig, logger: Logger): void {
  container.bind<Backend>(BACKEND).toDynamicValue(() => createBackend(config, logger));
}

function createBackend(config: DaemonConfig, logger: Logger): Backend {
  const log = logger.child({ backend: config.backend });
  switch (config.backend) {
    case 'linux':
      return new LinuxBackend({
        hostNetnsPath: config.linux.hostNetns || undefined,
        linkGroup: config.linux.linkGroup,
        detachGroup: config.linux.detachGroup,
        ipv6: mayServeIpv6(config),
        logger: log,
      });
    case 'dpu':
      return new DpuBackend({
        agentSocket: config.dpu.agentSocket,
        agentListen: config.dpu.agentListen || undefined,
        tls: config.dpu.agentListen
          ? { cert: config.dpu.tlsCert, key: config.dpu.tlsKey, ca: config.dpu.tlsCa }
          : undefined,
        ackTimeoutMs: config.dpu.ackTimeoutMs,
        heartbeatIntervalMs: config.dpu.heartbeatIntervalMs,
        hostNetnsPath: config.linux.hostNetns || undefined,
        logger: log,
      });
  }
}
