import type { ContainerModule } from 'inversify';
import { dpuBackendModule } from '../backends/dpu/module';
import { linuxBackendModule } from '../backends/linux/module';
import { effectiveNetworks } from '../core/ipam/effective-networks';
import type { BackendName, DaemonConfig } from '../core/config';
import type { Logger } from '../core/logger';

// The one module that knows every backend: it picks the modules of the backends the networks use, one
// per kind however many networks share it. Tests load their own.

export function backendModules(config: DaemonConfig, logger: Logger): ContainerModule[] {
  const kinds = new Set(effectiveNetworks(config).map((n) => n.backend));
  return [...kinds].map((kind) => backendModule(kind, config, logger));
}

export function backendModule(kind: BackendName, config: DaemonConfig, logger: Logger): ContainerModule {
  switch (kind) {
    case 'linux':
      return linuxBackendModule(config, logger);
    case 'dpu':
      return dpuBackendModule(config, logger);
  }
}
