import type { Container } from 'inversify';
import type { DaemonConfig } from '../core/config';
import type { Logger } from '../core/logger';

// The one module that knows every pool source: it loads the configured one. The core binds the static
// source by default, so "static" needs nothing here. The others are imported only when chosen: the
// Kubernetes client library alone adds ~76 MiB to the daemon's RSS, etcd3 ~16 MiB.

export async function bindPoolSource(
  container: Container,
  config: DaemonConfig,
  logger: Logger,
): Promise<void> {
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
