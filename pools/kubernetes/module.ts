import * as os from 'node:os';
import { ContainerModule } from 'inversify';
import type { DaemonConfig } from '../../core/config';
import type { Logger } from '../../core/logger';
import { POOL_SOURCE, type PoolSource } from '../../core/ipam/pool-source';
import { KubernetesPoolSource } from './kubernetes-pool-source';

/** Binds the kubernetes pool source in place of the default one. */
export function kubernetesPoolSourceModule(config: DaemonConfig, logger: Logger): ContainerModule {
  return new ContainerModule((_bind, _unbind, _isBound, rebind) => {
    rebind<PoolSource>(POOL_SOURCE).toDynamicValue(
      () =>
        new KubernetesPoolSource({
          nodeName: config.nodeName || os.hostname(),
          kubeconfig: config.kubeconfig,
          logger: logger.child({ poolSource: 'kubernetes' }),
        }),
    );
  });
}
