import { inject, injectable, optional } from 'inversify';
import type { Drift } from '../backend';
import type { AttachmentKey } from '../attachment-key';
import { AttachmentLedger } from '../attach/attachment-ledger';
import { Orchestrator } from '../attach/orchestrator';
import { CONFIG, type DaemonConfig } from '../config';
import { NETWORKS, type NetworkSet } from '../ipam/network';
import { LOGGER, type Logger } from '../logger';
import { METRICS, Metrics } from '../metrics';
import { NETNS_OPENER, type NetnsOpener } from '../netns-opener';
import { KeepListGc } from '../reconcile/keep-list-gc';
import { LeakSweep } from '../reconcile/leak-sweep';
import { MtuAlignment } from '../reconcile/mtu-alignment';
import { StartupReconcile } from '../reconcile/startup-reconcile';
import { STORE, Store } from '../store/store';
import type {
  AttachCall,
  Attachment,
  DetachCall,
  GcResult,
  PodPolicyView,
  ReconcileSummary,
  ServiceStatus,
  StatusOptions,
  SweepResult,
  WorkloadService,
} from '../workload-service';
import { NodeStatus } from './node-status';
import { FABRIC_CONTROLLER, type FabricController } from '../fabric/fabric-controller';
import { HOST_PORT, type HostPort, type HostPortAttacher } from '../host-port/host-port';
import { EGRESS_CONTROLLER, type EgressController } from '../egress/egress-controller';
import { POLICY_CONTROLLER, type PolicyController } from '../policy/policy-controller';
import { HOST_PORT_IF_NAME, HOST_PORT_WORKLOAD_ID } from '../attach/host-port-row';
import { attachmentKey } from '../attachment-key';
import { RowCache } from '../store/row-cache';
import { failedPrecondition } from '../errors';

// The workload service of one node, put together from its parts: the attach flow (attach/), the
// start-up reconcile, the leak sweep and GC (reconcile/), and Status. They share one ledger of the
// recorded attachments (locks, addresses, default routes, counts).

@injectable()
export class NodeService implements WorkloadService {
  private readonly orchestrator: Orchestrator;
  private readonly reconcile: StartupReconcile;
  private readonly keepListGc: KeepListGc;
  private readonly nodeStatus: NodeStatus;
  /** Brings running interfaces to their network's MTU when it changes (see mtu-alignment.ts). */
  private readonly mtu: MtuAlignment;
  /** Releases attachments whose namespace is gone (see leak-sweep.ts). */
  readonly sweeper: LeakSweep;
  /** What the host port (core/host-port/host-port.ts) does through the attach flow. */
  readonly hostPortAttacher: HostPortAttacher;

  constructor(
    @inject(NETWORKS) networks: NetworkSet,
    @inject(STORE) private readonly store: Store,
    @inject(NETNS_OPENER) netns: NetnsOpener,
    @inject(CONFIG) config: DaemonConfig,
    @inject(LOGGER) log: Logger,
    @inject(METRICS) metrics: Metrics,
    @inject(FABRIC_CONTROLLER) @optional() fabric?: FabricController,
    @inject(HOST_PORT) @optional() hostPort?: HostPort,
    @inject(EGRESS_CONTROLLER) @optional() private readonly egress?: EgressController,
    @inject(POLICY_CONTROLLER) @optional() private readonly policyController?: PolicyController,
  ) {
    const ledger = new AttachmentLedger(store, networks, netns, log, policyController);
    this.orchestrator = new Orchestrator(ledger, netns, config, log, metrics);
    this.reconcile = new StartupReconcile(ledger, netns, metrics, log);
    this.keepListGc = new KeepListGc(ledger, log);
    this.mtu = new MtuAlignment(ledger, netns, metrics, log.child({ part: 'mtu' }));
    this.sweeper = new LeakSweep(
      { rows: () => store.rows(), release: (rec, why) => ledger.releaseIfUnchanged(rec, why) },
      netns,
      config.sweepIntervalMs,
      log.child({ part: 'sweep' }),
      { released: () => metrics.sweepReleased.inc(), held: (hold) => metrics.setSweepHeld(hold?.kind) },
    );
    this.nodeStatus = new NodeStatus(ledger, metrics, {
      sweepHold: () => this.sweeper.hold,
      lastReconcile: () => this.reconcile.last,
      fabric: (opts) => {
        const st = fabric?.observe({ peers: opts.fabricPeers !== false });
        // Its routes are one per pod range of the cluster, left out with the peer rows.
        const port = hostPort?.status({ routes: opts.fabricPeers !== false });
        return st && port ? { ...st, hostPort: port } : st;
      },
      mtu: (network) => this.mtu.counts(network),
    });
    const hostPortRow = new RowCache(store, attachmentKey(HOST_PORT_WORKLOAD_ID, HOST_PORT_IF_NAME));
    this.hostPortAttacher = {
      row: () => hostPortRow.get(),
      attach: (call, ns, routes) => this.orchestrator.attachHostPort(call, ns, routes),
      check: () => this.orchestrator.check(HOST_PORT_WORKLOAD_ID, HOST_PORT_IF_NAME, 'presence'),
      release: (rec, why) => ledger.releaseIfUnchanged(rec, why),
      repaired: (rec, dataplane) =>
        ledger.locked(rec.workloadId, async () => {
          const current = store.get(rec.key);
          if (current?.createdAt !== rec.createdAt) return false;
          await store.put({ ...current, dataplane });
          return true;
        }),
    };
  }

  /**
   * Loads allocations from the store and reconciles the store with the backends. Called once before
   * the API starts serving.
   */
  async init(): Promise<ReconcileSummary> {
    this.sweeper.knownSinceStart(this.store.rows());
    const summary = await this.reconcile.run();
    // Interfaces attached with another MTU than their network's now follow it, in the background.
    this.mtu.start();
    return summary;
  }

  /** Called on shutdown before the store closes (see Orchestrator.drain). */
  async drain(boundMs: number): Promise<void> {
    await Promise.all([this.mtu.stop(boundMs), this.orchestrator.drain(boundMs)]);
  }

  async attach(call: AttachCall): Promise<Attachment> {
    const attached = await this.orchestrator.attach(call);
    // Its range may have just arrived (a Node's podCIDRs, an etcd block claimed by this very attach):
    // answered only once the egress masquerade covers it (egress-controller.ts inStep).
    await this.egress?.inStep();
    return attached;
  }

  detach(call: DetachCall): Promise<void> {
    return this.orchestrator.detach(call);
  }

  list(): Promise<Iterable<Attachment>> {
    return this.orchestrator.list();
  }

  listPage(after: AttachmentKey | undefined, limit: number): Promise<Attachment[]> {
    return this.orchestrator.listPage(after, limit);
  }

  get(workloadId: string, ifName?: string): Promise<Attachment[]> {
    return this.orchestrator.get(workloadId, ifName);
  }

  check(workloadId: string, ifName: string): Promise<Drift[]> {
    return this.orchestrator.check(workloadId, ifName);
  }

  async status(opts?: StatusOptions): Promise<ServiceStatus> {
    const st = await this.nodeStatus.read(opts);
    if (!this.policyController) return st;
    // A pod is attached only once its rules are in force: without them the node cannot attach pods.
    const policy = await this.policyController.status({ counters: opts?.policyCounters !== false });
    return {
      ...st,
      policy,
      ready: st.ready && policy.ready,
      reasons: [...st.reasons, ...policy.reasons.map((r) => `NetworkPolicy: ${r}`)],
    };
  }

  /**
   * Releases, now, the attachments the leak sweep would, even while its guard holds (the operator
   * asked); with `dryRun`, only says which.
   */
  async policy(namespace: string, pod: string): Promise<PodPolicyView[]> {
    if (!this.policyController) throw failedPrecondition('NetworkPolicy is off on this node (networkPolicy)');
    return this.policyController.explain(namespace, pod);
  }

  sweep(dryRun: boolean): Promise<SweepResult> {
    return dryRun ? this.sweeper.preview() : this.sweeper.sweep(true);
  }

  gc(
    keep: Array<{ workloadId: string; ifName?: string }>,
    origin?: string,
    network?: string,
  ): Promise<GcResult> {
    return this.keepListGc.run(keep, origin, network);
  }
}

/** The node service itself; WORKLOAD_SERVICE is what is served (it, behind the start-up gate). */
export const NODE_SERVICE = Symbol.for('workloadnet.NodeService');
