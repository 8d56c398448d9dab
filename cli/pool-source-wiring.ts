import type { Container } from 'inversify';
import type { DaemonConfig } from '../core/config';
import type { Logger } from '../core/logger';
import { staticPoolSourceModule } from '../sources/static/module';

// The one module that knows every pool source. The static sources are loaded always: every network but
// the default one has the static source's pools, and without a cluster source the default one has them
// too, with the peers file as the peer source. A cluster source's module then takes the default
// network's pools and the peers in their place. The cluster sources are imported only when chosen: the
// Kubernetes client library alone adds ~76 MiB to the daemon's RSS, etcd3 ~16 MiB.

export async function bindPoolSource(
  container: Container,
  config: DaemonConfig,
  logger: Logger,
): Promise<void> {
  container.load(staticPoolSourceModule(config, logger));
  switch (config.poolSource) {
    case 'static':
      return;
    case 'kubernetes': {
      const { kubernetesPoolSourceModule } = await import('../sources/kubernetes/module');
      container.load(kubernetesPoolSourceModule(config, logger));
      return;
    }
    case 'etcd': {
      const { etcdPoolSourceModule } = await import('../sources/etcd/module');
      container.load(etcdPoolSourceModule(config, logger));
      return;
    }
  }
}
