import * as os from 'node:os';
import { ContainerModule } from 'inversify';
import type { DaemonConfig } from '../../core/config';
import type { Logger } from '../../core/logger';
import { METRICS, type Metrics } from '../../core/metrics';
import { STORE } from '../../core/store/store';
import { POOL_SOURCE, type PoolSource } from '../../core/ipam/pool-source';
import type { Store } from '../../core/store/store';
import { EtcdPoolSource } from './etcd-pool-source';

/** Binds the etcd pool source in place of the default one. */
export function etcdPoolSourceModule(config: DaemonConfig, logger: Logger): ContainerModule {
  return new ContainerModule((_bind, _unbind, _isBound, rebind) => {
    rebind<PoolSource>(POOL_SOURCE).toDynamicValue(
      (ctx) =>
        new EtcdPoolSource({
          endpoints: config.etcd.endpoints,
          clusterCidrs: config.etcd.clusterCidrs,
          blockSize: config.etcd.blockSize,
          prefix: config.etcd.prefix,
          tls: config.etcd.ca
            ? { ca: config.etcd.ca, cert: config.etcd.cert, key: config.etcd.key }
            : undefined,
          nodeName: config.nodeName || os.hostname(),
          emptyBlockGraceMs: config.etcd.emptyBlockGraceSeconds * 1000,
          store: ctx.container.get<Store>(STORE),
          metrics: ctx.container.get<Metrics>(METRICS),
          logger: logger.child({ poolSource: 'etcd' }),
        }),
    );
  });
}
