import 'reflect-metadata';
import { Container } from 'inversify';
import { CONFIG, type DaemonConfig } from './config';
import { IpAllocator } from './ip-allocator';
import { LOGGER, type Logger } from './logger';
import { METRICS, Metrics } from './metrics';
import { ALLOCATOR, Orchestrator, STORE } from './orchestrator';
import { POOL_SOURCE, type PoolSource } from './pool-source';
import { POOL_SUPPLY, PoolSupply } from './pool-supply';
import { StaticPoolSource } from './static-pool-source';
import { Store } from './store';
import { WORKLOAD_SERVICE } from './workload-service';

// The one place where core services are bound. The backend is bound by the caller (the daemon's wiring
// picks it from config; a test rebinds BACKEND to whatever it needs), so core never imports a backend.
// The pool source defaults to the static one; the daemon's wiring rebinds POOL_SOURCE for the others.

export function createContainer(config: DaemonConfig, logger: Logger, metrics = new Metrics()): Container {
  const c = new Container({ defaultScope: 'Singleton' });
  c.bind<DaemonConfig>(CONFIG).toConstantValue(config);
  c.bind<Logger>(LOGGER).toConstantValue(logger);
  c.bind<Metrics>(METRICS).toConstantValue(metrics);
  c.bind<Store>(STORE).toDynamicValue(() => Store.open(config.stateDir));
  // The static source's pools are the allocator's from the start; other sources add theirs.
  c.bind<IpAllocator>(ALLOCATOR).toDynamicValue(
    () => new IpAllocator(config.poolSource === 'static' ? config.podCidrs.map((cidr) => ({ cidr })) : []),
  );
  c.bind<PoolSource>(POOL_SOURCE).toDynamicValue(() => new StaticPoolSource());
  c.bind<PoolSupply>(POOL_SUPPLY).toDynamicValue(
    (ctx) => new PoolSupply(ctx.container.get(POOL_SOURCE), ctx.container.get(ALLOCATOR), metrics),
  );
  c.bind<Orchestrator>(WORKLOAD_SERVICE).to(Orchestrator);
  return c;
}
