import type { Container } from 'inversify';
import { ApiServer } from '../serve/api-server';
import { CONFIG, type DaemonConfig } from '../config';
import { ENDPOINT, startAll, type Lifecycle } from '../lifecycle';
import { NODE_LOCK } from './node-lock';
import { READINESS_LISTENER, type ReadinessListener } from '../readiness-listener';
import { EGRESS_CONTROLLER, type EgressController } from '../egress/egress-controller';
import { FABRIC_CONTROLLER, type FabricController } from '../fabric/fabric-controller';
import { HOST_PORT, type HostPort } from '../host-port/host-port';
import { LOGGER, type Logger } from '../logger';
import { NODE_SERVICE, type NodeService } from '../service/node-service';
import { STORE } from '../store/store';
import type { ServiceGate } from '../serve/service-gate';
import { NETWORKS, type NetworkSet } from '../ipam/network';
import { prepareSocketPath } from '../serve/unix-socket';
import type { Store } from '../store/store';
import { WORKLOAD_SERVICE } from '../workload-service';
import { policyPart } from './policy-wiring';

/** How often readiness is pushed to gRPC health watchers and readiness listeners. */
const READINESS_INTERVAL_MS = 5000;

/**
 * The daemon: its parts, started in this order and stopped in reverse.
 *
 * 0. The node lock, when the wiring binds one (core/daemon/node-lock.ts): refuse to run beside
 *    another daemon serving the same network namespace, whatever its sockets and state directory.
 * 1. The socket guard: refuse to run beside a live daemon before touching anything (its backend
 *    would take our in-flight attachments for orphans).
 * 2. The sockets: the gRPC API and the endpoints bound under ENDPOINT (CNI, metrics) listen at once,
 *    behind the service gate, so a runtime calling during a restart is held, not refused.
 * 3. The backends (each one the networks use, once), 4. the pool sources (static pools, a Node's
 *    ranges, or etcd blocks; one per network), 5. the fabric (core/fabric: prepares the backends'
 *    fabric, publishes this node, follows the peer source; it does not wait for the source's first
 *    list), 6. the egress masquerade (core/egress), 7. the store and the start-up reconcile.
 * 8. Serving: the gate opens. Stopping it is the graceful part: stop accepting, let calls in flight
 *    finish (up to shutdownTimeoutMs), close every connection; then attaches still in flight are
 *    cancelled (their rows removed, see Orchestrator.drain in core/attach); only then the store and the backend.
 * 9. The host port (core/host-port/host-port.ts): with the fabric on the DPUs, the host's own namespace
 *    attached to their network; left attached when the daemon stops.
 * 10. The leak sweep (core/reconcile/leak-sweep.ts), every sweepIntervalMs.
 */
export class Daemon {
  private stopAll?: () => Promise<void>;
  private readyTimer?: NodeJS.Timeout;
  private api?: ApiServer;
  private closing?: Promise<void>;

  constructor(private readonly container: Container) {}

  /** The node service itself (past the gate). */
  get service(): NodeService {
    return this.container.get<NodeService>(NODE_SERVICE);
  }

  async start(): Promise<void> {
    const config = this.container.get<DaemonConfig>(CONFIG);
    const log = this.container.get<Logger>(LOGGER);
    const gate = this.container.get<ServiceGate>(WORKLOAD_SERVICE);
    const endpoints = this.container.isBound(ENDPOINT) ? this.container.getAll<Lifecycle>(ENDPOINT) : [];
    const closeSockets = (): Promise<void> => (this.closing ??= this.closeSockets(endpoints, config));
    const parts: Lifecycle[] = [
      ...(this.container.isBound(NODE_LOCK) ? [this.container.get<Lifecycle>(NODE_LOCK)] : []),
      { name: 'socket guard', start: () => prepareSocketPath(config.socket), stop: async () => undefined },
      {
        name: 'sockets',
        start: async () => {
          this.api = new ApiServer(gate, log, {
            maxConnections: config.apiMaxConnections,
            idleTimeoutMs: config.apiIdleTimeoutMs,
          });
          await this.api.listen(config.socket, config.socketGroup);
          for (const ep of endpoints) await ep.start();
        },
        stop: closeSockets,
      },
      lazy('backends', () => {
        const backends = this.container.get<NetworkSet>(NETWORKS).backends();
        return allOf('backends', backends);
      }),
      lazy('pool sources', () => {
        const supplies = this.container.get<NetworkSet>(NETWORKS).networks.map((n) => n.pools);
        return allOf(
          'pool sources',
          supplies.map((s) => ({ name: 'pool source', start: () => s.start(), stop: () => s.stop() })),
        );
      }),
      lazy('fabric', () => this.container.get<FabricController>(FABRIC_CONTROLLER)),
      lazy('egress masquerade', () => this.container.get<EgressController>(EGRESS_CONTROLLER)),
      {
        name: 'store and reconcile',
        start: async () => void (await this.service.init()),
        stop: async () => {
          // Rows of attaches that did not finish go before the store closes (see drain).
          await this.service.drain(DRAIN_MS).catch((err: unknown) => {
            log.error({ err: (err as Error).message }, 'cannot remove the rows of cancelled attaches');
          });
          await this.container.get<Store>(STORE).close();
        },
      },
      policyPart(this.container, config, log),
      { name: 'serving', start: async () => gate.open(), stop: closeSockets },
      {
        // Attached in the background once a DPU carries the fabric; kept at stop, like the pods.
        name: 'host port',
        start: async () => this.container.get<HostPort>(HOST_PORT).start(),
        stop: () => this.container.get<HostPort>(HOST_PORT).stop(),
      },
      {
        name: 'leak sweep',
        start: async () => this.service.sweeper.start(),
        stop: async () => this.service.sweeper.stop(),
      },
    ];
    this.stopAll = await startAll(parts, (part, err) =>
      log.warn({ part, err: (err as Error).message }, 'stopping a part failed'),
    );
    await this.followReadiness();
    this.logReady(config, log);
  }

  /** Tells health clients and readiness listeners whether Attach can succeed, now and every 5 s. */
  private async followReadiness(): Promise<void> {
    const listeners = this.container.isBound(READINESS_LISTENER)
      ? this.container.getAll<ReadinessListener>(READINESS_LISTENER)
      : [];
    const ready = async (): Promise<void> => {
      const st = await this.service
        .status({ fabricPeers: false, policyCounters: false })
        .catch(() => undefined);
      this.api?.setServing(st?.ready ?? false);
      for (const l of listeners) l.readinessChecked(st?.ready ?? false);
    };
    await ready();
    // Health clients see readiness changes (pool exhausted, agent lost) without calling Status. Every
    // 5 s: a Status costs a backend probe, sysctl reads and a count of the store, most of an idle
    // daemon's CPU at a shorter interval; the HTTP probes (/readyz) ask Status themselves.
    this.readyTimer = setInterval(() => void ready(), READINESS_INTERVAL_MS).unref();
  }

  /** The one line that says the daemon serves, and with what. */
  private logReady(config: DaemonConfig, log: Logger): void {
    const networks = this.container.get<NetworkSet>(NETWORKS).networks;
    log.info(
      {
        socket: config.socket,
        backend: networks[0]?.backend.name,
        // With etcd or Kubernetes the default network's pools arrive later (Status lists them).
        ...(config.poolSource === 'static'
          ? { pools: networks[0]?.config.podCidrs }
          : { poolSource: config.poolSource }),
        networks: networks.map((n) => `${n.name}:${n.backend.name}`),
      },
      'workloadnetd ready',
    );
  }

  /**
   * Stops accepting on every socket at once, lets calls in flight finish for up to shutdownTimeoutMs,
   * closes every connection, then stops the store and the backend.
   */
  async stop(): Promise<void> {
    clearInterval(this.readyTimer);
    await this.stopAll?.();
    this.stopAll = undefined;
  }

  private async closeSockets(endpoints: Lifecycle[], config: DaemonConfig): Promise<void> {
    await Promise.all([
      ...endpoints.map((ep) => ep.stop().catch(() => undefined)),
      this.api?.close(config.shutdownTimeoutMs),
    ]);
  }
}

/**
 * How long, once the sockets are closed, attaches still in flight get to answer or roll back before
 * the store closes; those still waiting on their backend then are cancelled. Within the margin the
 * daemon command allows beyond shutdownTimeoutMs.
 */
const DRAIN_MS = 1000;

/** A part resolved from the container only when it starts (building a backend may already fail). */
function lazy(name: string, get: () => Lifecycle): Lifecycle {
  let part: Lifecycle | undefined;
  return {
    name,
    start: () => (part = get()).start(),
    stop: () => part?.stop() ?? Promise.resolve(),
  };
}

/**
 * Several parts started in order as one: if one fails, those already started are stopped; stopping
 * goes in reverse.
 */
function allOf(name: string, parts: readonly Lifecycle[]): Lifecycle {
  const started: Lifecycle[] = [];
  const stop = async (): Promise<void> => {
    let first: unknown;
    for (const p of started.splice(0).reverse()) await p.stop().catch((err: unknown) => (first ??= err));
    if (first !== undefined) throw first;
  };
  return {
    name,
    start: async () => {
      for (const p of parts) {
        try {
          await p.start();
        } catch (err) {
          await stop().catch(() => undefined);
          throw err;
        }
        started.push(p);
      }
    },
    stop,
  };
}
