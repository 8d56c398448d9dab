import * as path from 'node:path';
import { ContainerModule } from 'inversify';
import { backendModules } from './backend-wiring';
import { parseMtu, loadConfigFile } from '../core/daemon/config-file';
import {
  DEFAULT_CONFIG,
  type BackendName,
  type ConfigOverrides,
  type DaemonConfig,
  type FabricConfig,
  type LogLevel,
  type PoolSourceName,
  type NetworkPolicyMode,
} from '../core/config';
import { effectiveNetworks } from '../core/ipam/effective-networks';
import { mergeConfig } from '../core/daemon/config-check';
import { createContainer } from '../core/daemon/container';
import { NODE_LOCK, NodeLock } from '../core/daemon/node-lock';
import { Daemon } from '../core/daemon/daemon';
import { applyFdBudget } from '../core/daemon/fd-limit';
import { ENDPOINT, type Lifecycle } from '../core/lifecycle';
import { createLogger, type Logger } from '../core/logger';
import { WORKLOAD_SERVICE, type WorkloadService } from '../core/workload-service';
import { Metrics } from '../core/metrics';
import { MetricsServer, type Readiness } from '../core/serve/metrics-server';
import { cniEndpoint } from './cni-endpoint';
import { bindPoolSource } from './pool-source-wiring';

export interface DaemonFlags {
  config?: string;
  socket?: string;
  cniSocket?: string;
  socketGroup?: string;
  stateDir?: string;
  backend?: string;
  podCidr?: string[];
  mtu?: string;
  logLevel?: string;
  metricsListen?: string;
  hostNetns?: string;
  agentSocket?: string;
  agentListen?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  ackTimeoutMs?: string;
  sweepIntervalMs?: string;
  poolSource?: string;
  networkPolicy?: string;
  nodeName?: string;
  kubeconfig?: string;
  etcdEndpoints?: string;
  clusterCidr?: string[];
  blockSize?: string;
  etcdPrefix?: string;
  etcdCa?: string;
  etcdCert?: string;
  etcdKey?: string;
  emptyBlockGraceSeconds?: string;
  fabric?: string;
  nodeIp?: string;
  peersFile?: string;
}

/** Embedded defaults, then the config file, then flags. */
export function effectiveConfig(flags: DaemonFlags): DaemonConfig {
  const file = flags.config ? loadConfigFile(flags.config) : {};
  const fromFlags: ConfigOverrides = {
    socket: flags.socket,
    cniSocket: flags.cniSocket,
    socketGroup: flags.socketGroup,
    stateDir: flags.stateDir,
    backend: flags.backend as BackendName | undefined,
    podCidrs: flags.podCidr && flags.podCidr.length > 0 ? flags.podCidr : undefined,
    mtu: flags.mtu === undefined ? undefined : parseMtu(flags.mtu),
    logLevel: flags.logLevel as LogLevel | undefined,
    metricsListen: flags.metricsListen,
    linux: { hostNetns: flags.hostNetns },
    dpu: {
      agentSocket: flags.agentSocket,
      agentListen: flags.agentListen,
      tlsCert: flags.tlsCert,
      tlsKey: flags.tlsKey,
      tlsCa: flags.tlsCa,
      ackTimeoutMs: flags.ackTimeoutMs === undefined ? undefined : Number(flags.ackTimeoutMs),
    },
    sweepIntervalMs: flags.sweepIntervalMs === undefined ? undefined : Number(flags.sweepIntervalMs),
    poolSource: flags.poolSource as PoolSourceName | undefined,
    networkPolicy: flags.networkPolicy as NetworkPolicyMode | undefined,
    nodeName: flags.nodeName,
    kubeconfig: flags.kubeconfig,
    etcd: {
      endpoints: flags.etcdEndpoints?.split(',').filter((e) => e !== ''),
      clusterCidrs: flags.clusterCidr && flags.clusterCidr.length > 0 ? flags.clusterCidr : undefined,
      blockSize: flags.blockSize === undefined ? undefined : Number(flags.blockSize),
      prefix: flags.etcdPrefix,
      ca: flags.etcdCa,
      cert: flags.etcdCert,
      key: flags.etcdKey,
      emptyBlockGraceSeconds:
        flags.emptyBlockGraceSeconds === undefined ? undefined : Number(flags.emptyBlockGraceSeconds),
    },
    fabric: {
      mode: flags.fabric as FabricConfig['mode'] | undefined,
      nodeIp: flags.nodeIp,
      // A relative path means the operator's working directory, not the daemon's.
      peersFile: flags.peersFile === undefined ? undefined : path.resolve(flags.peersFile),
    },
  };
  return mergeConfig(DEFAULT_CONFIG, file, fromFlags);
}

/** Runs the daemon until SIGTERM/SIGINT. Start-up failures are one clear line and exit code 1. */
export async function runDaemon(flags: DaemonFlags): Promise<void> {
  let config: DaemonConfig;
  try {
    config = effectiveConfig(flags);
  } catch (err) {
    fatal(err);
  }
  const logger = createLogger(config.logLevel);
  config = applyFdBudget(config, logger);
  const metrics = new Metrics({ processMetrics: true, eventLoopResolutionMs: config.eventLoopResolutionMs });
  const container = createContainer(config, logger, metrics);
  container.load(...backendModules(config, logger), endpointsModule(config, logger, metrics));
  // One daemon per node (core/daemon/node-lock.ts), for a daemon whose Linux backend programs the host
  // namespace: two would take each other's links for orphans. Bound here, for a real daemon only:
  // in-process test daemons share the machine's own namespace and must not take it. A daemon with DPU
  // networks only does not take it yet (its host side is the VFs it moves, each its agent's).
  if (effectiveNetworks(config).some((n) => n.backend === 'linux'))
    container
      .bind<NodeLock>(NODE_LOCK)
      .toDynamicValue(() => new NodeLock(config, logger.child({ part: 'node lock' })));
  await bindPoolSource(container, config, logger);
  const daemon = new Daemon(container);
  try {
    await daemon.start();
  } catch (err) {
    fatal(err);
  }
  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, graceMs: config.shutdownTimeoutMs }, 'shutting down');
    // The last word if stopping the backend or the store hangs: exit rather than wait for SIGKILL.
    setTimeout(() => {
      logger.error({ signal }, 'shutdown did not finish in time; exiting anyway');
      process.exit(1);
    }, config.shutdownTimeoutMs + HARD_STOP_MARGIN_MS).unref();
    daemon.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

/**
 * What the daemon serves besides the gRPC API: the CNI endpoint, and when configured the HTTP listener
 * (metrics, health, readiness).
 */
function endpointsModule(config: DaemonConfig, logger: Logger, metrics: Metrics): ContainerModule {
  return new ContainerModule((bind) => {
    bind<Lifecycle>(ENDPOINT).toDynamicValue((ctx) =>
      cniEndpoint(ctx.container.get<WorkloadService>(WORKLOAD_SERVICE), config, logger),
    );
    if (config.metricsListen) {
      bind<Lifecycle>(ENDPOINT).toDynamicValue((ctx) => {
        const service = ctx.container.get<WorkloadService>(WORKLOAD_SERVICE);
        // The served service answers Status while the daemon starts ("starting"), so /healthz holds
        // through a long start-up and /readyz says why the node is not ready yet.
        const readiness = (): Promise<Readiness> =>
          service.status({ fabricPeers: false }).then((st) => ({ ready: st.ready, reasons: st.reasons }));
        return new MetricsServer(config.metricsListen, metrics, { readiness });
      });
    }
  });
}

/** Time beyond shutdownTimeoutMs that stopping the backend and the store may take. */
const HARD_STOP_MARGIN_MS = 3000;

function fatal(err: unknown): never {
  process.stderr.write(`workloadnetd: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
