import type { ContainerModule } from 'inversify';
import { dpuBackendModule } from '../backends/dpu/module';
import { linuxBackendModule } from '../backends/linux/module';
import type { DaemonConfig } from '../core/config';
import type { Logger } from '../core/logger';

// The one module that knows every backend: it picks the configured one's module. Tests load their own.

export function backendModule(config: DaemonConfig, logger: Logger): ContainerModule {
  switch (config.backend) {
    case 'linux':
      return linuxBackendModule(config, logger);
    case 'dpu':
      return dpuBackendModule(config, logger);
  }
}
