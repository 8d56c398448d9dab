import { CniServer } from '../adapters/cni/cni-server';
import type { DaemonConfig } from '../core/config';
import type { Endpoint } from '../core/daemon';
import type { Logger } from '../core/logger';
import { secureSocket } from '../core/unix-socket';
import type { WorkloadService } from '../core/workload-service';

/** The CNI endpoint that the workloadnet-cni forwarder talks to, as one of the daemon's endpoints. */
export function cniEndpoint(service: WorkloadService, config: DaemonConfig, logger: Logger): Endpoint {
  const server = new CniServer(service, {
    socketPath: config.cniSocket,
    logger: logger.child({ endpoint: 'cni' }),
    defaultMtu: config.mtu,
    headerTimeoutMs: config.cniHeaderTimeoutMs,
    bodyTimeoutMs: config.cniBodyTimeoutMs,
    idleTimeoutMs: config.cniIdleTimeoutMs,
    maxConnections: config.cniMaxConnections,
  });
  return {
    name: 'cni',
    listen: async () => {
      await server.listen();
      secureSocket(config.cniSocket, config.socketGroup);
    },
    close: (graceMs) => server.close(graceMs),
  };
}
