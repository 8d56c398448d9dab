import { ContainerModule, type interfaces } from 'inversify';
import { BACKEND, type Backend } from '../../core/backend';
import { nodeNameOf, type DaemonConfig } from '../../core/config';
import type { Logger } from '../../core/logger';
import { METRICS, type Metrics } from '../../core/metrics';
import { STORE } from '../../core/store/store';
import { POOL_SOURCE, type PoolSource } from '../../core/ipam/pool-source';
import { PEER_SOURCE, type PeerSource } from '../../core/peer-source';
import type { Store } from '../../core/store/store';
import { EtcdPeerSource } from './etcd-peer-source';
import { EtcdPoolSource } from './etcd-pool-source';

/** Binds the etcd pool source in place of the default one, and the etcd peer source beside it. */
export function etcdPoolSourceModule(config: DaemonConfig, logger: Logger): ContainerModule {
  const tls = config.etcd.ca
    ? { ca: config.etcd.ca, cert: config.etcd.cert, key: config.etcd.key }
    : undefined;
  const nodeName = nodeNameOf(config);
  return new ContainerModule((bind, _unbind, isBound, rebind) => {
    rebind<PoolSource>(POOL_SOURCE).toDynamicValue(
      (ctx) =>
        new EtcdPoolSource({
          endpoints: config.etcd.endpoints,
          clusterCidrs: config.etcd.clusterCidrs,
          blockSize: config.etcd.blockSize,
          prefix: config.etcd.prefix,
          tls,
          nodeName,
          emptyBlockGraceMs: config.etcd.emptyBlockGraceSeconds * 1000,
          goneGraceMs: config.dpu.goneGraceSeconds * 1000,
          connectedDpus: () => connectedDpus(ctx.container),
          store: ctx.container.get<Store>(STORE),
          metrics: ctx.container.get<Metrics>(METRICS),
          logger: logger.child({ poolSource: 'etcd' }),
        }),
    );
    // Peers come from the same etcd as the blocks; the source connects only when the fabric starts it.
    (isBound(PEER_SOURCE) ? rebind<PeerSource>(PEER_SOURCE) : bind<PeerSource>(PEER_SOURCE)).toDynamicValue(
      (ctx) =>
        new EtcdPeerSource({
          endpoints: config.etcd.endpoints,
          tls,
          prefix: config.etcd.prefix,
          clusterCidrs: config.etcd.clusterCidrs,
          blockSize: config.etcd.blockSize,
          nodeName,
          // The same daemon as the pool source names in the alive key: only its holder publishes.
          storeId: () => ctx.container.get<Store>(STORE).identity.storeId,
          leaseTtlSeconds: config.fabric.leaseTtlSeconds,
          logger: logger.child({ peerSource: 'etcd' }),
        }),
    );
  });
}

/**
 * The DPU agents connected now, as the health of the backends that place ports on DPUs lists them;
 * undefined when none does. The backends are looked up at each call, long after the source was built.
 */
export async function connectedDpus(
  container: interfaces.Container,
): Promise<ReadonlySet<string> | undefined> {
  let listed = false;
  const out = new Set<string>();
  for (const backend of container.getAll<Backend>(BACKEND)) {
    if (!backend.place) continue;
    const { dpus } = await backend.health();
    if (!dpus) continue;
    listed = true;
    for (const d of dpus) if (d.connected) out.add(d.id);
  }
  return listed ? out : undefined;
}
