import { AddressSpace } from '../address-space';
import type { Backend } from '../backend';
import { DEFAULT_NETWORK } from '../config';
import type { ResolvedNetwork } from './effective-networks';
import { failedPrecondition, invalidArgument } from '../errors';
import type { AllocatedIp, IpAllocator } from './ip-allocator';
import type { PoolSupply } from './pool-supply';
import type { PlacedAddresses } from './placed-addresses';
import { DEFAULT_POD_MTU, type PodMtuSource } from '../fabric-dataplane';

// A named network: its backend, its own pools, and how its interfaces route. A node may serve several
// (the pod's eth0 on a host veth, net1 on a DPU VF); each attachment belongs to one and is attached,
// checked, reconciled and released by that network's backend. Core sees backends only through the
// Backend interface, each built once by DI however many networks use it.

export class Network {
  /** Live attachments by "<endpoint>|<mtu>", kept as rows come and go (Status reads it: no scan). */
  private readonly running = new Map<string, number>();

  constructor(
    readonly config: ResolvedNetwork,
    readonly backend: Backend,
    readonly allocator: IpAllocator,
    readonly pools: PoolSupply,
    /** Where a placed port's address comes from, when this network's ports go on DPUs (placed-addresses.ts). */
    readonly slices?: PlacedAddresses,
    /** What the fabric carries, for an MTU of "auto" (config mtu 0). */
    private readonly fabricMtu?: PodMtuSource,
  ) {}

  get name(): string {
    return this.config.name;
  }

  /**
   * The MTU of a new interface whose call asks for none: the configured one, exactly; with "auto", what
   * the fabric carries to a pod behind this backend (on that endpoint, when placed), else 1500.
   */
  mtu(endpoint?: string): number {
    if (this.config.mtu !== 0) return this.config.mtu;
    return this.fabricMtu?.auto(this.backend.fabric, endpoint) ?? DEFAULT_POD_MTU;
  }

  /**
   * The MTU an interface of this network attached without its own should have now: the configured
   * one; with "auto", what the fabric carries, and undefined while that is not known yet.
   */
  settledMtu(endpoint?: string): number | undefined {
    if (this.config.mtu !== 0) return this.config.mtu;
    return this.fabricMtu ? this.fabricMtu.settled(this.backend.fabric, endpoint) : DEFAULT_POD_MTU;
  }

  /** Calls `listener` when what the fabric carries (for an "auto" MTU) becomes known or changes. */
  onMtuChange(listener: () => void): void {
    if (this.config.mtu === 0) this.fabricMtu?.onChange(listener);
  }

  /** What the fabric carries to a pod of this network; undefined when that is not known or not limited. */
  carried(endpoint?: string): number | undefined {
    return this.fabricMtu?.carried(this.backend.fabric, endpoint);
  }

  /** Counts a live attachment in or out (the ledger calls it with the row count). */
  counted(rec: { mtu: number; endpoint?: string }, delta: 1 | -1): void {
    const key = `${rec.endpoint ?? ''}|${rec.mtu}`;
    const n = (this.running.get(key) ?? 0) + delta;
    if (n > 0) this.running.set(key, n);
    else this.running.delete(key);
  }

  /**
   * Live attachments whose MTU is larger than what the fabric carries to them now (attached before the
   * uplink's MTU or the mode changed, or with a call's or the config's MTU): they keep it, and their
   * large packets to other nodes are dropped.
   */
  aboveFabric(): number {
    let n = 0;
    for (const [key, count] of this.running) {
      const bar = key.indexOf('|');
      const endpoint = key.slice(0, bar) || undefined;
      const fits = this.carried(endpoint);
      if (fits !== undefined && Number(key.slice(bar + 1)) > fits) n += count;
    }
    return n;
  }

  /**
   * Addresses for a new interface: from the slices of the endpoint its backend placed it on, when
   * this network's ranges are cut; else from the pools as they come.
   */
  allocate(endpoint?: string): Promise<AllocatedIp[]> {
    if (endpoint === undefined || this.slices === undefined) return this.pools.allocate();
    return this.slices.allocate(this.pools, endpoint);
  }

  /** Gives addresses back, to the pools and, for borrowed ones, out of their endpoint's prefixes. */
  release(addresses: readonly string[]): void {
    this.pools.release(addresses);
    this.slices?.released(addresses);
  }

  /**
   * What an interface of this network routes through its gateway when it does not carry the default
   * route: the network's own ranges (its configured pools, or those its pool source supplied) and its
   * extra routes.
   */
  ranges(): string[] {
    const pools = this.config.podCidrs.length
      ? this.config.podCidrs
      : this.allocator.report().map((p) => p.cidr);
    return [...new Set([...pools, ...this.config.routes])];
  }
}

export class NetworkSet {
  private readonly byName: Map<string, Network>;

  /**
   * Joins every network's allocator to one address space, so no pool, configured or supplied later by
   * a pool source, ever overlaps another network's. Throws INVALID_ARGUMENT on an overlap at hand.
   */
  constructor(
    readonly networks: readonly Network[],
    /** How the ranges of the networks whose backend places ports are shared among the node's DPUs. */
    readonly slices?: PlacedAddresses,
  ) {
    this.byName = new Map(networks.map((n) => [n.name, n]));
    const space = new AddressSpace();
    for (const n of networks) n.allocator.join(space, n.name);
  }

  /** The network a call names; absent means `default`. INVALID_ARGUMENT for one this node lacks. */
  get(name: string | undefined): Network {
    const n = this.byName.get(name || DEFAULT_NETWORK);
    if (n) return n;
    throw invalidArgument(
      `unknown network "${name || DEFAULT_NETWORK}"; this node serves ${[...this.byName.keys()].map((k) => `"${k}"`).join(', ')}`,
    );
  }

  /** The network of a stored attachment, if the node still serves it. */
  of(rec: { network?: string }): Network | undefined {
    return this.byName.get(rec.network || DEFAULT_NETWORK);
  }

  /** The backend that programmed a stored attachment: its network's, or the one of the same name. */
  backendOf(rec: { network?: string; backend: string }): Backend {
    const own = this.of(rec);
    if (own && own.backend.name === rec.backend) return own.backend;
    const same = this.backends().find((b) => b.name === rec.backend);
    if (same) return same;
    if (own) return own.backend;
    const any = this.networks[0];
    if (!any) throw failedPrecondition('no network is configured');
    return any.backend;
  }

  /** Every distinct backend, in the order of the networks that use them. */
  backends(): Backend[] {
    return [...new Set(this.networks.map((n) => n.backend))];
  }

  /** The network Status and the seed contract describe first: `default`, else the first one. */
  get primary(): Network {
    return this.byName.get(DEFAULT_NETWORK) ?? (this.networks[0] as Network);
  }

  /** Every network's pool cursors, merged (CIDRs never overlap between networks). */
  cursors(): Record<string, string> {
    if (this.networks.length === 1) return this.primary.allocator.cursors();
    return Object.assign({}, ...this.networks.map((n) => n.allocator.cursors())) as Record<string, string>;
  }

  restoreCursors(cursors: Record<string, string>): void {
    for (const n of this.networks) n.allocator.restoreCursors(cursors);
  }

  private readonly restoredListeners: Array<() => void> = [];

  /**
   * Called once every stored attachment's addresses are held again (start-up): only then may an address
   * be reserved outside the attach flow without taking one a recorded pod holds.
   */
  onRestored(listener: () => void): void {
    this.restoredListeners.push(listener);
  }

  restored(): void {
    for (const l of this.restoredListeners) l();
  }
}

/**
 * Picks each network's backend among those bound: the one of its kind, or, when a test binds a single
 * stand-in backend, that one for every network.
 */
export function chooseBackend(network: ResolvedNetwork, backends: readonly Backend[]): Backend {
  const own = backends.find((b) => b.name === network.backend);
  if (own) return own;
  if (backends.length === 1 && backends[0]) return backends[0];
  throw failedPrecondition(
    `network "${network.name}" needs the ${network.backend} backend, which is not loaded (loaded: ${backends.map((b) => b.name).join(', ') || 'none'})`,
  );
}

/** inversify identifier of the NetworkSet. */
export const NETWORKS = Symbol.for('workloadnet.Networks');
