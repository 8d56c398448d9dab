import { ContainerModule } from 'inversify';
import { BACKEND, type Backend } from '../../core/backend';
import { mayServeIpv6, type DaemonConfig } from '../../core/config';
import type { Logger } from '../../core/logger';
import { LinuxBackend } from './linux-backend';

/** The Linux backend as the daemon loads it: BACKEND, built from the daemon's config. */
export function linuxBackendModule(config: DaemonConfig, logger: Logger): ContainerModule {
  return new ContainerModule((bind) => {
    bind<Backend>(BACKEND).toDynamicValue(
      () =>
        new LinuxBackend({
          hostNetnsPath: config.linux.hostNetns || undefined,
          linkGroup: config.linux.linkGroup,
          detachGroup: config.linux.detachGroup,
          ipv6LinkLocal: config.linux.ipv6LinkLocal,
          ipv6: mayServeIpv6(config),
          logger: logger.child({ backend: 'linux' }),
        }),
    );
  });
}
