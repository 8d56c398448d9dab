import { Container, type ContainerModule } from 'inversify';
import { POOL_SOURCE } from '../../../core/ipam/pool-source';
import { PEER_SOURCE } from '../../../core/peer-source';

/**
 * `module` (a cluster source's) loaded into a container as the daemon's wiring hands it over: a pool
 * source bound for the module to take the place of (a stand-in), and with `peerSource`, a peer source too.
 */
export function loadedOverBindings(module: ContainerModule, peerSource: boolean): Container {
  const c = new Container({ defaultScope: 'Singleton' });
  c.bind(POOL_SOURCE).toConstantValue({});
  if (peerSource) c.bind(PEER_SOURCE).toConstantValue({ kind: 'static' });
  c.load(module);
  return c;
}
