import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { DpuAgentStatus } from './backend';

// Prometheus metrics of the daemon (prom-client). One registry per daemon so tests can run several in
// one process without their counters mixing.

// The gauge's labels are the leak sweep's reasons to hold (core/reconcile/sweep-guard.ts): they are
// defined here, with the gauge, so that the metrics import no room of the core.
/** Why a pass of the leak sweep released nothing; the label of workloadnet_sweep_held. */
export type HoldKind = 'directory_unreadable' | 'directory_other_mount' | 'directory_empty' | 'too_many_gone';

export const HOLD_KINDS: readonly HoldKind[] = [
  'directory_unreadable',
  'directory_other_mount',
  'directory_empty',
  'too_many_gone',
];

export class Metrics {
  readonly registry = new Registry();
  readonly callSeconds = new Histogram({
    name: 'workloadnet_call_duration_seconds',
    help: 'Latency of workload API calls by operation, backend and result code.',
    labelNames: ['op', 'backend', 'code'] as const,
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  readonly errors = new Counter({
    name: 'workloadnet_errors_total',
    help: 'Failed workload API calls by operation and gRPC code.',
    labelNames: ['op', 'code'] as const,
    registers: [this.registry],
  });
  readonly poolSize = new Gauge({
    name: 'workloadnet_pool_addresses',
    help: 'Usable addresses per pool.',
    labelNames: ['pool', 'family'] as const,
    registers: [this.registry],
  });
  readonly poolUsed = new Gauge({
    name: 'workloadnet_pool_addresses_used',
    help: 'Allocated addresses per pool.',
    labelNames: ['pool', 'family'] as const,
    registers: [this.registry],
  });
  readonly attachments = new Gauge({
    name: 'workloadnet_attachments',
    help: 'Attachments held in the store.',
    registers: [this.registry],
  });
  readonly backendReady = new Gauge({
    name: 'workloadnet_backend_ready',
    help: '1 when the backend reports healthy, else 0.',
    labelNames: ['backend'] as const,
    registers: [this.registry],
  });
  readonly networkReady = new Gauge({
    name: 'workloadnet_network_ready',
    help: '1 when the network can attach (its backend healthy, its pools ready), else 0.',
    labelNames: ['network', 'backend'] as const,
    registers: [this.registry],
  });
  readonly networkAttachments = new Gauge({
    name: 'workloadnet_network_attachments',
    help: 'Attachments held in the store, per network.',
    labelNames: ['network'] as const,
    registers: [this.registry],
  });
  readonly agentConnected = new Gauge({
    name: 'workloadnet_agent_connected',
    help: 'DPU backend: 1 while an agent holds a session, else 0.',
    registers: [this.registry],
  });
  readonly agentHeartbeatAge = new Gauge({
    name: 'workloadnet_agent_heartbeat_age_seconds',
    help: "DPU backend: seconds since the agent's last heartbeat.",
    registers: [this.registry],
  });
  readonly dpuAgentHealthy = new Gauge({
    name: 'workloadnet_dpu_agent_healthy',
    help: 'DPU backend: 1 while the agent is connected and heard from, else 0.',
    labelNames: ['agent'] as const,
    registers: [this.registry],
  });
  readonly dpuAgentPorts = new Gauge({
    name: 'workloadnet_dpu_agent_ports',
    help: 'DPU backend: ports placed on the agent.',
    labelNames: ['agent'] as const,
    registers: [this.registry],
  });
  readonly dpuAgentVfsFree = new Gauge({
    name: 'workloadnet_dpu_agent_vfs_free',
    help: 'DPU backend: free VFs the agent last reported in its inventory.',
    labelNames: ['agent'] as const,
    registers: [this.registry],
  });
  readonly dpuAgentHeartbeatAge = new Gauge({
    name: 'workloadnet_dpu_agent_heartbeat_age_seconds',
    help: "DPU backend: seconds since the agent's last heartbeat (connected agents).",
    labelNames: ['agent'] as const,
    registers: [this.registry],
  });

  readonly dpuAgentCarriesFabric = new Gauge({
    name: 'workloadnet_dpu_agent_carries_fabric',
    help: 'DPU backend with the fabric on: 1 when the agent carries the fabric (protocol version 3, "fabric-vxlan", an uplink address), else 0 (its pods are reachable only on this node).',
    labelNames: ['agent'] as const,
    registers: [this.registry],
  });
  readonly dpuAgentFabricObjects = new Gauge({
    name: 'workloadnet_dpu_agent_fabric_objects',
    help: 'DPU backend with the fabric on: fabric objects the agent should hold (state="desired") and those it acknowledged at their current generations (state="acked"); they differ while a snapshot or change is unacknowledged.',
    labelNames: ['agent', 'state'] as const,
    registers: [this.registry],
  });
  readonly dpuAgentFabricPeers = new Gauge({
    name: 'workloadnet_dpu_agent_fabric_peers',
    help: 'DPU backend with the fabric on: tunnel endpoints the agent holds (state="total") and those it reports reachable (state="reachable").',
    labelNames: ['agent', 'state'] as const,
    registers: [this.registry],
  });

  /** The per-agent gauges, for exactly the agents given (an agent forgotten loses its series). */
  setDpus(dpus: ReadonlyArray<DpuAgentStatus>): void {
    for (const g of [
      this.dpuAgentHealthy,
      this.dpuAgentPorts,
      this.dpuAgentVfsFree,
      this.dpuAgentHeartbeatAge,
      this.dpuAgentCarriesFabric,
      this.dpuAgentFabricObjects,
      this.dpuAgentFabricPeers,
    ])
      g.reset();
    for (const d of dpus) {
      const agent = { agent: d.id };
      this.dpuAgentHealthy.set(agent, d.healthy ? 1 : 0);
      this.dpuAgentPorts.set(agent, d.ports);
      if (d.vfsTotal) this.dpuAgentVfsFree.set(agent, d.vfsFree);
      if (d.lastHeartbeatAgeMs !== undefined)
        this.dpuAgentHeartbeatAge.set(agent, d.lastHeartbeatAgeMs / 1000);
      // No fabric part while the fabric is off: no series, rather than zeros that read as "behind".
      const f = d.fabric;
      if (!f) continue;
      this.dpuAgentCarriesFabric.set(agent, f.carries ? 1 : 0);
      if (!f.carries) continue;
      this.dpuAgentFabricObjects.set({ ...agent, state: 'acked' }, f.objectsAcked);
      this.dpuAgentFabricObjects.set({ ...agent, state: 'desired' }, f.objectsDesired);
      // An agent away says nothing of its peers now: no reachable series rather than a 0 read as "down".
      if (d.connected) this.dpuAgentFabricPeers.set({ ...agent, state: 'reachable' }, f.peersReachable);
      this.dpuAgentFabricPeers.set({ ...agent, state: 'total' }, f.peersTotal);
    }
  }

  readonly sweepReleased = new Counter({
    name: 'workloadnet_sweep_released_total',
    help: 'Attachments the leak sweep detached because their network namespace was gone.',
    registers: [this.registry],
  });

  readonly sweepHeld = new Gauge({
    name: 'workloadnet_sweep_held',
    help: 'Leak sweep: 1 while it releases nothing because namespaces that look gone are no evidence (reason: directory_unreadable, directory_other_mount, directory_empty, too_many_gone), else 0.',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  /** The sweep's verdict: 1 for the reason it holds for, 0 for every other. */
  setSweepHeld(kind: HoldKind | undefined): void {
    for (const k of HOLD_KINDS) this.sweepHeld.set({ reason: k }, k === kind ? 1 : 0);
  }

  readonly reconciled = new Counter({
    name: 'workloadnet_reconcile_items_total',
    help: 'Items handled by start-up reconcile, by outcome (orphan_removed, adopted, repaired, released, cut_short, healthy).',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly mtuChanges = new Counter({
    name: 'workloadnet_mtu_changes_total',
    help: "Running interfaces given their network's new MTU in place (updated), or not (failed: they keep theirs).",
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly poolSourceConnected = new Gauge({
    name: 'workloadnet_pool_source_connected',
    help: 'Pool source: 1 while it reaches its backing service (Kubernetes API, etcd), else 0.',
    labelNames: ['source'] as const,
    registers: [this.registry],
  });
  readonly blocksOwned = new Gauge({
    name: 'workloadnet_pool_blocks_owned',
    help: 'etcd pool source: address blocks this node owns, by family.',
    labelNames: ['family'] as const,
    registers: [this.registry],
  });
  readonly blockClaims = new Counter({
    name: 'workloadnet_pool_block_claims_total',
    help: 'etcd pool source: block claim attempts by outcome (claimed, lost_race, full, error) and mode.',
    labelNames: ['outcome', 'mode'] as const,
    registers: [this.registry],
  });
  readonly blockClaimSeconds = new Histogram({
    name: 'workloadnet_pool_block_claim_duration_seconds',
    help: 'etcd pool source: time to claim one block (listing and compare-and-create transactions).',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly blockReleases = new Counter({
    name: 'workloadnet_pool_block_releases_total',
    help: 'etcd pool source: empty blocks given back after the grace period.',
    registers: [this.registry],
  });

  readonly fabricReady = new Gauge({
    name: 'workloadnet_fabric_ready',
    help: 'Fabric: 1 when the peer source has a full list and the last peer table is in the dataplane, else 0 (absent when the fabric is off).',
    registers: [this.registry],
  });
  readonly fabricPeers = new Gauge({
    name: 'workloadnet_fabric_peers',
    help: 'Fabric: peers in the table, by the path that reaches them (direct, vxlan, unreachable, external).',
    labelNames: ['path'] as const,
    registers: [this.registry],
  });
  readonly fabricPeersWithdrawing = new Gauge({
    name: 'workloadnet_fabric_peers_withdrawing',
    help: 'Fabric: peers that left their source and are kept programmed for fabric.withdrawGraceSeconds.',
    registers: [this.registry],
  });
  readonly fabricRefusedClaims = new Gauge({
    name: 'workloadnet_fabric_refused_claims',
    help: 'Fabric: claims of peers refused in the last apply because another peer (the incumbent) or this node holds them, by claim (prefix, mac, underlay, gateway); each peer says which and who in Status.',
    labelNames: ['claim'] as const,
    registers: [this.registry],
  });
  readonly fabricPeersDegraded = new Gauge({
    name: 'workloadnet_fabric_peers_degraded',
    help: 'Fabric: peers that answered data-path probes before and left the last few unanswered (fabric.probeIntervalSeconds); they stay programmed.',
    registers: [this.registry],
  });
  readonly fabricProbeRtt = new Gauge({
    name: 'workloadnet_fabric_probe_rtt_seconds',
    help: "Fabric: data-path probe round-trip times across peers (each peer's median of its recent probes), by quantile (0.5, 0.9, 1 = the slowest peer).",
    labelNames: ['quantile'] as const,
    registers: [this.registry],
  });
  readonly fabricObjects = new Gauge({
    name: 'workloadnet_fabric_objects',
    help: 'Fabric: objects of ours in the kernel, by kind (routes, neighbours, fdb).',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly fabricRepairs = new Counter({
    name: 'workloadnet_fabric_repairs_total',
    help: 'Fabric: objects put back after they were removed or changed behind our back.',
    registers: [this.registry],
  });
  readonly fabricFilteredPackets = new Counter({
    name: 'workloadnet_fabric_filtered_packets_total',
    help: "Fabric: packets the source filter dropped (fabric.sourceFilter): VXLAN not from a peer's underlay, for another VNI or from an inner source outside the sender's prefixes, and hybrid's direct-path pod sources from a peer that does not own them; as the kernel counts them.",
    registers: [this.registry],
  });
  readonly fabricBorrowed = new Gauge({
    name: 'workloadnet_fabric_borrowed_addresses',
    help: 'Fabric with DPUs: addresses held outside the slices of the DPU holding their port (each announced as a /32 or /128); fabric.strictSlices refuses them instead.',
    registers: [this.registry],
  });
  readonly fabricApplies = new Counter({
    name: 'workloadnet_fabric_applies_total',
    help: 'Fabric: peer tables handed to the dataplane, by result (ok, not_ready, error).',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  readonly policyApplySeconds = new Histogram({
    name: 'workloadnet_policy_apply_seconds',
    help: 'NetworkPolicy: time from a change (a pod attached or gone, a label, a policy) being taken up to its rules in force, by backend and result (ok, error).',
    labelNames: ['backend', 'result'] as const,
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });
  /** What the policy gauges read when scraped (set by the policy controller when policy is on). */
  policyFigures?: () => Promise<PolicyFigures>;
  readonly policyObjects = new Gauge({
    name: 'workloadnet_policy_objects',
    help: "NetworkPolicy: the source's policies, this node's isolated pods, their rules and the address sets they name, by kind.",
    labelNames: ['kind'] as const,
    registers: [this.registry],
    collect: async () => {
      const f = await this.policyFigures?.();
      if (f) for (const [kind, n] of Object.entries(f.objects)) this.policyObjects.set({ kind }, n);
    },
  });
  readonly policyDenied = new Gauge({
    name: 'workloadnet_policy_denied_packets',
    help: "NetworkPolicy: packets denied to and from this node's pods since their rules went in, by direction, as the dataplane counts them.",
    labelNames: ['direction'] as const,
    registers: [this.registry],
    collect: async () => {
      const f = await this.policyFigures?.();
      if (f)
        for (const d of ['ingress', 'egress'] as const) this.policyDenied.set({ direction: d }, f.denied[d]);
    },
  });

  /** Records one NetworkPolicy apply. */
  policyApplied(backend: string, ms: number, err?: Error): void {
    this.policyApplySeconds.observe({ backend, result: err ? 'error' : 'ok' }, ms / 1000);
  }

  /** processMetrics: Node.js process metrics, the event loop sampled every eventLoopResolutionMs. */
  constructor(opts: { processMetrics?: boolean; eventLoopResolutionMs?: number } = {}) {
    if (opts.processMetrics)
      collectDefaultMetrics({
        register: this.registry,
        ...(opts.eventLoopResolutionMs !== undefined
          ? { eventLoopMonitoringPrecision: opts.eventLoopResolutionMs }
          : {}),
      });
    this.setSweepHeld(undefined);
  }

  /** Records one finished call. */
  observe(op: string, backend: string, code: string, seconds: number): void {
    this.callSeconds.observe({ op, backend, code }, seconds);
    if (code !== 'OK') this.errors.inc({ op, code });
  }
}

/** What the NetworkPolicy gauges show. */
export interface PolicyFigures {
  objects: Record<'policies' | 'pods' | 'rules' | 'sets', number>;
  denied: { ingress: number; egress: number };
}

export const METRICS = Symbol.for('workloadnet.Metrics');
