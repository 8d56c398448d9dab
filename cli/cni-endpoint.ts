import { CniServer } from '../adapters/cni/cni-server';
import type { DaemonConfig } from '../core/config';
import type { Lifecycle } from '../core/lifecycle';
import type { Logger } from '../core/logger';
import type { WorkloadService } from '../core/workload-service';

/** The CNI endpoint that the workloadnet-cni forwarder talks to, as one of the daemon's endpoints. */
export function cniEndpoint(service: WorkloadService, config: DaemonConfig, logger: Logger): Lifecycle {
  const server = new CniServer(service, {
    socketPath: config.cniSocket,
    socketGroup: config.socketGroup,
    logger: logger.child({ endpoint: 'cni' }),
    // The core applies the network's MTU (which may follow the fabric's) to a config without one; with
    // named networks the config's `name` picks the network.
    ...(config.networks.length > 0 ? { networkFromName: true } : {}),
    headerTimeoutMs: config.cniHeaderTimeoutMs,
    bodyTimeoutMs: config.cniBodyTimeoutMs,
    idleTimeoutMs: config.cniIdleTimeoutMs,
    maxConnections: config.cniMaxConnections,
  });
  return {
    name: 'cni',
    start: () => server.listen(),
    stop: () => server.close(config.shutdownTimeoutMs),
  };
}
