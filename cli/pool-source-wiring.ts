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

/**
 * Whether IPv6 addresses may be handed out, known before any pool exists (the Linux backend enables
 * IPv6 forwarding at start). A Node's ranges are only known later and may be dual-stack, so the
 * kubernetes source says yes.
 */
export function mayServeIpv6(config: DaemonConfig): boolean {
  switch (config.poolSource) {
    case 'static':
      return config.podCidrs.some((c) => c.includes(':'));
    case 'etcd':
      return config.etcd.clusterCidrs.some((c) => c.includes(':'));
    case 'kubernetes':
      return true;
  }
}
