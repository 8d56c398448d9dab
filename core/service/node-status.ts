import type { Backend, BackendHealth } from '../backend';
import type { AttachmentLedger } from '../attach/attachment-ledger';
import { asWorkloadNetError } from '../errors';
import type { FabricStatus } from '../fabric-status';
import type { Metrics } from '../metrics';
import type {
  NetworkStatus,
  PoolUsage,
  ReconcileSummary,
  ServiceStatus,
  StatusOptions,
} from '../workload-service';

// Status: whether the node can attach now and, if not, why, per network and as a whole; the gauges
// that say the same are set from the same reading (the daemon asks every 2 s for gRPC health).

export interface StatusInputs {
  /** Why the leak sweep releases nothing now, if it does not. */
  sweepHold(): { reason: string } | undefined;
  lastReconcile(): ReconcileSummary | undefined;
  /**
   * The fabric between nodes (its gauges set from the same reading); its readiness is its own: a node
   * attaches its pods without it.
   */
  fabric?(opts: StatusOptions): FabricStatus | undefined;
  /** Running interfaces of a network given its MTU in place, and those that could not be. */
  mtu?(network: string): { updated: number; failed: number };
}

export class NodeStatus {
  constructor(
    private readonly ledger: AttachmentLedger,
    private readonly metrics: Metrics,
    private readonly inputs: StatusInputs,
  ) {}

  async read(opts: StatusOptions = {}): Promise<ServiceStatus> {
    const { networks: networkSet, store } = this.ledger;
    const healths = new Map(
      await Promise.all(networkSet.backends().map(async (b) => [b, await backendHealth(b)] as const)),
    );
    const writes = store.writeHealth();
    const several = networkSet.networks.length > 1;
    const reasons: string[] = [];
    const networks: NetworkStatus[] = [];
    // Each supply's status() resets the pool gauges (pools come and go): read them all, then set.
    const supplies = networkSet.networks.map((n) => [n, n.pools.status()] as const);
    for (const [network, poolStatus] of supplies) {
      const health = healths.get(network.backend) ?? { ready: false, reasons: [] };
      const own = [...health.reasons.filter(() => !health.ready)];
      if (!health.ready && own.length === 0) own.push(`backend ${network.backend.name} is not ready`);
      own.push(...poolStatus.reasons);
      const pools: PoolUsage[] = poolStatus.pools.map((p) => ({ ...p, network: network.name }));
      for (const p of pools) {
        this.metrics.poolSize.set({ pool: p.cidr, family: String(p.family) }, p.size);
        this.metrics.poolUsed.set({ pool: p.cidr, family: String(p.family) }, p.used);
      }
      for (const r of own)
        if (!reasons.includes(r)) reasons.push(several ? `network ${network.name}: ${r}` : r);
      const attachments = this.ledger.attachmentsOn(network.name);
      const mtu = this.inputs.mtu?.(network.name) ?? { updated: 0, failed: 0 };
      networks.push({
        name: network.name,
        backend: network.backend.name,
        ready: own.length === 0,
        reasons: own,
        // What a new interface gets now ("auto" follows the fabric).
        mtu: network.mtu(),
        defaultRoute: network.config.defaultRoute,
        routes: network.config.defaultRoute ? [] : network.ranges(),
        pools,
        backendDetails: { ...(health.details ?? {}) },
        attachments,
        mtuUpdated: mtu.updated,
        mtuFailed: mtu.failed,
      });
      this.metrics.networkReady.set(
        { network: network.name, backend: network.backend.name },
        own.length ? 0 : 1,
      );
      this.metrics.networkAttachments.set({ network: network.name }, attachments);
    }
    if (!writes.ok) reasons.push(`${writes.reason} (writes failing since ${writes.since})`);
    const held = this.inputs.sweepHold();
    if (held) reasons.push(held.reason);
    const attachments = store.count();
    this.metrics.attachments.set(attachments);
    this.setBackendGauges(healths);
    const dpus = [...healths.values()].flatMap((h) => h.dpus ?? []);
    if (dpus.length) this.metrics.setDpus(dpus);
    const fabric = this.inputs.fabric?.(opts);
    const primary = networkSet.primary;
    const primaryHealth = healths.get(primary.backend);
    const primarySupply = supplies.find(([n]) => n === primary)?.[1];
    return {
      ready: reasons.length === 0,
      reasons,
      backend: primary.backend.name,
      backendDetails: { ...(primaryHealth?.details ?? {}) },
      pools: networks.flatMap((n) => n.pools),
      poolSource: primarySupply?.source,
      attachments,
      reconcile: this.inputs.lastReconcile(),
      networks,
      dpus: dpus.length ? dpus : undefined,
      fabric,
    };
  }
  /** Each backend's readiness, and an agent-based one's session and heartbeat, as gauges. */
  private setBackendGauges(healths: ReadonlyMap<Backend, BackendHealth>): void {
    for (const [b, health] of healths) {
      this.metrics.backendReady.set({ backend: b.name }, health.ready ? 1 : 0);
      const details: Record<string, string | number | boolean> = health.details ?? {};
      if (details.agentSocket !== undefined) {
        // Agent-based backends report their live session (sessionId) in the health details.
        this.metrics.agentConnected.set(details.sessionId || health.dpus?.some((d) => d.connected) ? 1 : 0);
        if (typeof details.lastHeartbeatAgeMs === 'number')
          this.metrics.agentHeartbeatAge.set(details.lastHeartbeatAgeMs / 1000);
      }
    }
  }
}

async function backendHealth(b: Backend): Promise<BackendHealth> {
  return b.health().catch((err: unknown) => ({
    ready: false,
    reasons: [`backend health check failed: ${asWorkloadNetError(err).message}`],
    details: {},
  }));
}
