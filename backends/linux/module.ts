import { ContainerModule, type interfaces } from 'inversify';
import { BACKEND, type Backend } from '../../core/backend';
import type { DaemonConfig } from '../../core/config';
import { NETWORKS, type NetworkSet } from '../../core/ipam/network';
import type { Logger } from '../../core/logger';
import { LinuxBackend } from './linux-backend';

/** The Linux backend as the daemon loads it: BACKEND, built from the daemon's config. */
export function linuxBackendModule(config: DaemonConfig, logger: Logger): ContainerModule {
  return new ContainerModule((bind) => {
    bind<Backend>(BACKEND).toDynamicValue((ctx) => {
      const backend: LinuxBackend = new LinuxBackend({
        hostNetnsPath: config.linux.hostNetns || undefined,
        linkGroup: config.linux.linkGroup,
        detachGroup: config.linux.detachGroup,
        ipv6LinkLocal: config.linux.ipv6LinkLocal,
        ipv6: () => hasIpv6Range(ctx.container, backend),
        logger: logger.child({ backend: 'linux' }),
      });
      return backend;
    });
  });
}

/**
 * Whether a network of `backend` has an IPv6 pool now: configured, or supplied by its pool source
 * (a Kubernetes Node's podCIDRs, an etcd block), which may be long after start.
 */
function hasIpv6Range(container: interfaces.Container, backend: Backend): boolean {
  if (!container.isBound(NETWORKS)) return false;
  return container
    .get<NetworkSet>(NETWORKS)
    .networks.some((n) => n.backend === backend && n.allocator.families().includes(6));
}
