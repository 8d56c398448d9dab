import type { Container } from 'inversify';
import type { DaemonConfig } from '../core/config';
import type { Logger } from '../core/logger';
import { etcdPoolSourceModule } from '../pools/etcd';
import { kubernetesPoolSourceModule } from '../pools/kubernetes';

// The one module that knows every pool source: it loads the configured one. The core binds the static
// source by default, so "static" needs nothing here.

export function bindPoolSource(container: Container, config: DaemonConfig, logger: Logger): void {
  switch (config.poolSource) {
    case 'static':
      return;
    case 'kubernetes':
      container.load(kubernetesPoolSourceModule(config, logger));
      return;
    case 'etcd':
      container.load(etcdPoolSourceModule(config, logger));
      return;
  }
}
