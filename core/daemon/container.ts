import 'reflect-metadata';
import * as path from 'node:path';
import { Container, type interfaces } from 'inversify';
import { currentBootId } from '../../lib/boot-id';
import { BACKEND, type Backend } from '../backend';
import { CONFIG, DEFAULT_NETWORK, nodeNameOf, type DaemonConfig } from '../config';
import { effectiveNetworks, type ResolvedNetwork } from '../ipam/effective-networks';
import { fabricSettings } from '../fabric/fabric-settings';
import { AppliedPeersFile } from '../fabric/applied-peers-file';
import { EGRESS_CONTROLLER, EgressController } from '../egress/egress-controller';
import { FABRIC_CONTROLLER, FabricController } from '../fabric/fabric-controller';
import { PEER_SOURCE, type PeerSource } from '../peer-source';
import { FabricPodMtu } from '../fabric/pod-mtu';
import { HOST_PORT, HostPort } from '../host-port/host-port';
import { ALLOCATOR, IpAllocator } from '../ipam/ip-allocator';
import { LOGGER, type Logger } from '../logger';
import { METRICS, Metrics } from '../metrics';
import { NETNS_OPENER, kernelNetnsOpener, type NetnsOpener } from '../netns-opener';
import { NETWORKS, Network, NetworkSet, chooseBackend } from '../ipam/network';
import { POOL_SOURCE, STATIC_POOL_SOURCE, type PoolSource } from '../ipam/pool-source';
import { POOL_SUPPLY, PoolSupply } from '../ipam/pool-supply';
import { SliceBook } from '../fabric/slice-book';
import { ServiceGate } from '../serve/service-gate';
import { TunnelAddresses } from '../fabric/tunnel-addresses';
import { STORE, Store } from '../store/store';
import { NODE_SERVICE, NodeService } from '../service/node-service';
import { WORKLOAD_SERVICE } from '../workload-service';
import { bindPolicy } from './policy-wiring';

// The one place where core services are bound. The backend arrives as a ContainerModule loaded by the
// caller (the daemon's wiring picks it from config; a test loads its own), so core never imports a
// backend. Endpoints (CNI, metrics) are bound under ENDPOINT the same way. The sources arrive as modules
// (sources/, loaded by the daemon's wiring): POOL_SOURCE and PEER_SOURCE from the static module, then
// from a cluster source's in their place. Networks: the `default` network's pools are ALLOCATOR and
// POOL_SUPPLY (its source may be any); every other network has static pools of its own, from
// STATIC_POOL_SOURCE. Backends are bound under BACKEND, one binding per kind in use. The fabric
// controller takes the peer source to the dataplanes of the backends in use that offer one.

/** How often the host port is looked at (attached when it is not, checked when it is). */
const HOST_PORT_INTERVAL_MS = 2000;
/** How often the egress masquerade's ranges are looked at for a change (a range added, a peer). */
const EGRESS_INTERVAL_MS = 2000;

export function createContainer(config: DaemonConfig, logger: Logger, metrics = new Metrics()): Container {
  const c = new Container({ defaultScope: 'Singleton' });
  c.bind<DaemonConfig>(CONFIG).toConstantValue(config);
  c.bind<Logger>(LOGGER).toConstantValue(logger);
  c.bind<Metrics>(METRICS).toConstantValue(metrics);
  c.bind<Store>(STORE).toDynamicValue(() => Store.open(config.stateDir, { logger }));
  const networks = effectiveNetworks(config);
  // What the fabric carries, learnt by its controller, read by the networks whose MTU is auto.
  const podMtu = new FabricPodMtu(fabricSettings(config));
  const primary = networks.find((n) => n.name === DEFAULT_NETWORK) ?? networks[0];
  // The static source's pools are the allocator's from the start; other sources add theirs.
  c.bind<IpAllocator>(ALLOCATOR).toDynamicValue(
    () =>
      new IpAllocator(
        config.poolSource === 'static' ? (primary?.podCidrs ?? []).map((cidr) => ({ cidr })) : [],
      ),
  );
  c.bind<PoolSupply>(POOL_SUPPLY).toDynamicValue(
    (ctx) => new PoolSupply(ctx.container.get(POOL_SOURCE), ctx.container.get(ALLOCATOR), metrics),
  );
  c.bind<BuiltNetworks>(BUILT_NETWORKS).toDynamicValue((ctx) =>
    networkSetOf(ctx.container, config, logger, metrics, { networks, primary, podMtu }),
  );
  c.bind<NetworkSet>(NETWORKS).toDynamicValue((ctx) => ctx.container.get<BuiltNetworks>(BUILT_NETWORKS).set);
  c.bind<FabricController>(FABRIC_CONTROLLER).toDynamicValue((ctx) =>
    fabricControllerOf(ctx.container, config, logger, metrics, podMtu),
  );
  c.bind<HostPort>(HOST_PORT).toDynamicValue((ctx) => hostPortOf(ctx.container, config, logger));
  c.bind<EgressController>(EGRESS_CONTROLLER).toDynamicValue((ctx) =>
    egressControllerOf(ctx.container, config, logger),
  );
  c.bind<NetnsOpener>(NETNS_OPENER).toConstantValue(kernelNetnsOpener);
  c.bind<NodeService>(NODE_SERVICE).to(NodeService);
  // What the API and the endpoints serve: the node service behind the start-up gate (service-gate.ts).
  c.bind<ServiceGate>(WORKLOAD_SERVICE).toDynamicValue(
    (ctx) => new ServiceGate(() => ctx.container.get<NodeService>(NODE_SERVICE)),
  );
  bindPolicy(c, config, logger, metrics);
  return c;
}

/** Every prefix the peer source lists now (a peer's DPUs' slices lie inside its prefixes). */
function peerPrefixes(source: PeerSource | undefined): string[] {
  const out: string[] = [];
  source?.peers().forEach((p) => out.push(...p.prefixes));
  return out;
}

/** The networks as built, and the fabric's slice book when their ranges are shared among DPUs. */
interface BuiltNetworks {
  set: NetworkSet;
  slices?: SliceBook;
}

/** inversify identifier of the BuiltNetworks (this file's own: the rest read NETWORKS). */
const BUILT_NETWORKS = Symbol.for('workloadnet.BuiltNetworks');

/** The networks the daemon serves, each with its backend, pools and (on DPUs) slices. */
function networkSetOf(
  container: interfaces.Container,
  config: DaemonConfig,
  logger: Logger,
  metrics: Metrics,
  {
    networks,
    primary,
    podMtu,
  }: { networks: ResolvedNetwork[]; primary: ResolvedNetwork | undefined; podMtu: FabricPodMtu },
): BuiltNetworks {
  const backends = container.getAll<Backend>(BACKEND);
  const parts = networks.map((n) => {
    const backend = chooseBackend(n, backends);
    const allocator =
      n === primary
        ? container.get<IpAllocator>(ALLOCATOR)
        : new IpAllocator(n.podCidrs.map((cidr) => ({ cidr })));
    const supply =
      n === primary
        ? container.get<PoolSupply>(POOL_SUPPLY)
        : new PoolSupply(container.get<PoolSource>(STATIC_POOL_SOURCE), allocator, metrics);
    return { n, backend, allocator, supply };
  });
  // With the fabric on, the ranges of networks whose backend places ports (its DPUs) are cut among
  // them (core/fabric/slice-book.ts); the store is reached only when the book loads, at reconcile.
  const sliced = fabricSettings(config) ? parts.filter((p) => p.backend.place) : [];
  const slices = sliced.length
    ? new SliceBook({
        count: config.dpu.fabricSlices,
        strict: config.fabric.strictSlices,
        networks: sliced.map((p) => ({ name: p.n.name, allocator: p.allocator, supply: p.supply })),
        store: () => container.get<Store>(STORE),
        log: logger.child({ part: 'slices' }),
      })
    : undefined;
  const set = new NetworkSet(
    parts.map(
      (p) =>
        new Network(p.n, p.backend, p.allocator, p.supply, sliced.includes(p) ? slices : undefined, podMtu),
    ),
    slices,
  );
  return { set, slices };
}

/** The fabric's controller, with the tunnel addresses it announces when the pools are etcd blocks. */
function fabricControllerOf(
  container: interfaces.Container,
  config: DaemonConfig,
  logger: Logger,
  metrics: Metrics,
  podMtu: FabricPodMtu,
): FabricController {
  const settings = fabricSettings(config);
  const { set: networkSet, slices } = container.get<BuiltNetworks>(BUILT_NETWORKS);
  const backends = networkSet.backends();
  // With etcd blocks, the host's key is a tunnel address of its own (core/fabric/tunnel-addresses.ts);
  // a network whose ports are on DPUs carries the fabric there and needs none. Built even with the
  // fabric off, so that a start with it off releases the one an earlier start reserved.
  const primary = networkSet.primary;
  const tunnelWanted =
    settings !== undefined &&
    config.poolSource === 'etcd' &&
    !!primary.backend.fabric &&
    !primary.backend.place;
  const tunnel = new TunnelAddresses({
    allocator: primary.allocator,
    store: () => container.get<Store>(STORE),
    wanted: tunnelWanted,
    log: logger.child({ part: 'fabric' }),
  });
  networkSet.onRestored(() => {
    void tunnel
      .restore()
      .catch((err: unknown) =>
        logger.error({ err: (err as Error).message }, 'cannot restore the fabric tunnel addresses'),
      );
  });
  return new FabricController({
    settings,
    nodeName: nodeNameOf(config),
    bootId: currentBootId(),
    // Resolved only when the fabric is on: a cluster source connects when it is built.
    source: settings ? container.get<PeerSource>(PEER_SOURCE) : undefined,
    dataplanes: settings ? backends.flatMap((b) => (b.fabric ? [b.fabric] : [])) : [],
    backends: backends.map((b) => b.name),
    withdrawGraceMs: config.fabric.withdrawGraceSeconds * 1000,
    appliedPeers: settings
      ? new AppliedPeersFile(
          path.join(config.stateDir, 'fabric-peers.json'),
          logger.child({ part: 'fabric' }),
        )
      : undefined,
    podMtu,
    networks: networkSet.networks.filter((n) => n.backend.fabric),
    slices,
    // What the pool source announces for this node (the primary network's pools), unless it is etcd:
    // a block hands out every address, so its first may be a pod's and cannot be the gateway key;
    // there the node reserves a tunnel address of its own instead.
    keyRanges: () =>
      networkSet.primary.backend.fabric && config.poolSource !== 'etcd'
        ? networkSet.primary.allocator.allPools().map((p) => p.cidr.text)
        : [],
    ...(tunnelWanted ? { tunnelAddresses: () => tunnel.current() } : {}),
    log: logger.child({ part: 'fabric' }),
    metrics,
  });
}

/**
 * The host's path into the overlay, when the fabric is on and a network's backend places ports on DPUs:
 * on the default network if it is one of those, else the first (core/host-port/host-port.ts).
 */
function hostPortOf(container: interfaces.Container, config: DaemonConfig, logger: Logger): HostPort {
  const settings = fabricSettings(config);
  const networkSet = container.get<NetworkSet>(NETWORKS);
  const onDpus = settings ? networkSet.networks.filter((n) => n.backend.place && n.backend.fabric) : [];
  const network = onDpus.includes(networkSet.primary) ? networkSet.primary : onDpus[0];
  const fabric = (): FabricController => container.get<FabricController>(FABRIC_CONTROLLER);
  const hostNetns = config.linux.hostNetns;
  return new HostPort({
    enabled: config.dpu.hostPort,
    network,
    hostNetnsPath: hostNetns,
    openHost: () => container.get<NetnsOpener>(NETNS_OPENER).openHost(hostNetns),
    attacher: () => container.get<NodeService>(NODE_SERVICE).hostPortAttacher,
    // The cluster's ranges when the pool source knows them (etcd); else every range known now: this
    // node's and its peers' (a peer that joins later is routed once the host port is attached again).
    routes: () => {
      if (settings?.clusterCidrs.length) return [...settings.clusterCidrs];
      const st = fabric().observe();
      const peers = st.peers.flatMap((p) => [
        ...p.prefixes,
        ...(p.endpoints ?? []).flatMap((e) => e.prefixes),
      ]);
      return [...new Set([...(network?.ranges() ?? []), ...peers])];
    },
    carriers: () => (fabric().observe({ peers: false }).endpoints ?? []).map((e) => e.id),
    intervalMs: HOST_PORT_INTERVAL_MS,
    log: logger.child({ part: 'host-port' }),
  });
}

/** Pods' traffic leaving the cluster, masqueraded by the backends that can, for the networks that ask. */
function egressControllerOf(
  container: interfaces.Container,
  config: DaemonConfig,
  logger: Logger,
): EgressController {
  const networkSet = container.get<NetworkSet>(NETWORKS);
  const peers = fabricSettings(config) ? container.get<PeerSource>(PEER_SOURCE) : undefined;
  // The default network's configured podCidrs are its pools only with the static source; with
  // etcd or Kubernetes they are an unused default (10.88.0.0/16, podman's own) that must not be
  // masqueraded as ours nor exempted as cluster traffic.
  const sourced = config.poolSource !== 'static' ? networkSet.primary : undefined;
  const pools = (n: Network): string[] => [
    ...(n === sourced ? [] : n.config.podCidrs),
    ...n.allocator.allPools().map((p) => p.cidr.text),
  ];
  const configured = config.poolSource === 'etcd' ? config.etcd.clusterCidrs : config.fabric.clusterCidrs;
  const controller = new EgressController({
    targets: networkSet.backends().flatMap((b) => {
      const egress = b.egress;
      if (!egress) return [];
      const mine = networkSet.networks.filter((n) => n.backend === b && n.config.masquerade);
      return [{ backend: b.name, dataplane: egress, podRanges: () => mine.flatMap(pools) }];
    }),
    // Every network's pools, the configured cluster ranges, and every peer's prefixes (its DPUs'
    // slices are inside them): a pod on another node keeps seeing this pod's own address.
    clusterRanges: () => [...networkSet.networks.flatMap(pools), ...configured, ...peerPrefixes(peers)],
    intervalMs: EGRESS_INTERVAL_MS,
    log: logger.child({ part: 'egress' }),
  });
  // A Node's range or an etcd block arriving is masqueraded at once, not at the next poll: the
  // first pods of a start are attached right after their range arrives.
  for (const n of networkSet.networks) n.allocator.onPoolsChange(() => controller.changed());
  return controller;
}
