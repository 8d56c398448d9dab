import 'reflect-metadata';
import { Container } from 'inversify';
import { CONFIG, type DaemonConfig } from './config';
import { IpAllocator } from './ip-allocator';
import { LOGGER, type Logger } from './logger';
import { METRICS, Metrics } from './metrics';
import { ALLOCATOR, Orchestrator, STORE } from './orchestrator';
import { Store } from './store';
import { WORKLOAD_SERVICE } from './workload-service';

// The one place where core services are bound. The backend is bound by the caller (the daemon's wiring
// picks it from config; a test rebinds BACKEND to whatever it needs), so core never imports a backend.

export function createContainer(config: DaemonConfig, logger: Logger, metrics = new Metrics()): Container {
  const c = new Container({ defaultScope: 'Singleton' });
  c.bind<DaemonConfig>(CONFIG).toConstantValue(config);
  c.bind<Logger>(LOGGER).toConstantValue(logger);
  c.bind<Metrics>(METRICS).toConstantValue(metrics);
  c.bind<Store>(STORE).toDynamicValue(() => Store.open(config.stateDir, { logger }));
  c.bind<IpAllocator>(ALLOCATOR).toDynamicValue(
    () => new IpAllocator(config.podCidrs.map((cidr) => ({ cidr }))),
  );
  c.bind<Orchestrator>(WORKLOAD_SERVICE).to(Orchestrator);
  return c;
}
