import { ContainerModule } from 'inversify';
import type { DaemonConfig } from '../../core/config';
import { effectiveNetworks } from '../../core/ipam/effective-networks';
import type { Logger } from '../../core/logger';
import { POOL_SOURCE, STATIC_POOL_SOURCE, type PoolSource } from '../../core/ipam/pool-source';
import { PEER_SOURCE, type PeerSource } from '../../core/peer-source';
import { StaticPeerSource } from './static-peer-source';
import { StaticPoolSource } from './static-pool-source';

/**
 * Binds the static sources: the configured pools, for the default network and for every other one, and
 * the peers file as the peer source. Loaded first: a cluster source's module then takes the default
 * network's pools and the peers in their place (rebinding POOL_SOURCE and PEER_SOURCE).
 */
export function staticPoolSourceModule(config: DaemonConfig, logger: Logger): ContainerModule {
  return new ContainerModule((bind) => {
    bind<PoolSource>(POOL_SOURCE).toDynamicValue(() => new StaticPoolSource());
    bind<PoolSource>(STATIC_POOL_SOURCE)
      .toDynamicValue(() => new StaticPoolSource())
      .inTransientScope();
    bind<PeerSource>(PEER_SOURCE).toDynamicValue(
      () =>
        new StaticPeerSource(config.fabric.peersFile, logger.child({ part: 'peers' }), {
          // A file's prefix is routed only inside the cluster's ranges and over none of this node's own.
          clusterCidrs: config.fabric.clusterCidrs,
          ownRanges: effectiveNetworks(config).flatMap((n) => n.podCidrs),
        }),
    );
  });
}
