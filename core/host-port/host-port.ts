import type { BackendHealth, DataplaneResult, Drift, Placement } from '../backend';
import type { Netns } from '../../lib/netns/netns-handle';
import { asWorkloadNetError } from '../errors';
import type { Logger } from '../logger';
import type { Network } from '../ipam/network';
import type { AttachmentRecord } from '../store/attachment-record';
import type { AttachCall } from '../workload-service';
import { toSpec, toView } from '../attach/attachment-views';
import { HOST_PORT_IF_NAME, HOST_PORT_WORKLOAD_ID } from '../attach/host-port-row';
import type { HostPortStatus } from '../fabric-status';

// The host port: when the DPUs carry the fabric, the node's own network namespace has no path into the
// overlay (it holds no VXLAN device and no route to a pod; docs/fabric.md). So the daemon attaches that
// namespace itself, as a workload of the network on the DPUs, through the same attach flow as any pod:
// placed on a DPU that carries the fabric, addressed from its slice, recorded, programmed by its agent.
// Its interface (wn-host0) takes no default route, only the cluster's ranges: host → any pod goes
// through the DPU, and the host's own traffic stays where it was.
// A room of its own (core/host-port/): it drives the attach flow, reads the store and the networks,
// none of which the fabric's room imports.
//
// It lives as long as the node: a restart finds its row and keeps it (the agent's snapshot lists it, the
// VF stays where it is: no packet lost), an orderly shutdown leaves it as it leaves the pods, and the
// reclaimers that judge attachments by their namespace never take it (attach/host-port-row.ts). It
// moves only on evidence that its port is dead: its row was detached by an operator (a DPU gone for
// good; then it is attached anew with the usual placement), or its interface is missing from the host
// while its DPU is connected and synced, on two passes in a row; then its port is programmed again in
// place, on its DPU, under its recorded address (host-network connections to pods outlive it). A DPU
// that is merely away keeps it, degraded, as it keeps its pods; one that is resyncing after a
// (re)connect (a reboot re-creates every VF, re-plumbed as each port is acked) is waited for.

/** What the controller does through the node's attach flow (core/service/node-service.ts). */
export interface HostPortAttacher {
  /** The host port's row on its network, if recorded. */
  row(): AttachmentRecord | undefined;
  attach(call: Omit<AttachCall, 'workloadId' | 'origin'>, netns: Netns, routes: string[]): Promise<unknown>;
  /** Whether its interface is there (a presence check: all the controller acts on). */
  check(): Promise<Drift[]>;
  /** Detaches it if it is still this row; true when it did. */
  release(rec: AttachmentRecord, why: string): Promise<boolean>;
  /**
   * Records what a repair of this row programmed (a re-created VF has its own name and ifindex), if the
   * row is still this one; true when it did.
   */
  repaired(rec: AttachmentRecord, dataplane: DataplaneResult): Promise<boolean>;
}

export interface HostPortOptions {
  /** dpu.hostPort. */
  enabled: boolean;
  /** The network on the DPUs it joins; none when no network's DPUs carry the fabric (no host port). */
  network?: Network;
  /** The host namespace's path as recorded (the fabric's host namespace; empty: the daemon's own). */
  hostNetnsPath: string;
  /** Opens the host namespace (not refused as a caller's Attach of it would be). */
  openHost(): Promise<Netns>;
  /** The node's attach flow; resolved when first used (the node service is built after this). */
  attacher(): HostPortAttacher;
  /** The ranges routed through the host port: every pod range of the cluster this node knows. */
  routes(): string[];
  /** This node's DPUs that carry the fabric now (FabricStatus.endpoints). */
  carriers(): string[];
  /** How often it looks again. */
  intervalMs: number;
  log: Logger;
}

/** The host port of one node: kept attached while the fabric is on the DPUs. */
export class HostPort {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private reason = '';
  /** The row whose interface was seen missing on the last pass (its creation time). */
  private missingSince?: string;
  /** Why a missing interface is waited for rather than counted (its DPU resyncing); empty: it is not. */
  private waiting = '';

  constructor(private readonly opts: HostPortOptions) {}

  /** The network it joins, when this node has one for it. */
  get network(): Network | undefined {
    return this.opts.network;
  }

  start(): void {
    if (!this.opts.enabled || !this.opts.network || this.timer) return;
    void this.pass();
    this.timer = setInterval(() => void this.pass(), this.opts.intervalMs);
    this.timer.unref();
  }

  /**
   * Stops looking; the host port stays attached (a restart adopts it, as it does the pods). An attach
   * in flight is not waited for: the attach flow's own drain settles it before the store closes.
   */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One pass now (never two at once). */
  pass(): Promise<void> {
    this.running ??= this.ensure()
      .catch((err: unknown) => this.pending(`${asWorkloadNetError(err).message}`))
      .finally(() => (this.running = undefined));
    return this.running;
  }

  /**
   * Undefined when the node has no network whose DPUs carry the fabric. `routes: false` leaves the
   * list of its routes out (one per pod range of the cluster), their count stays.
   */
  status(opts: { routes?: boolean } = {}): HostPortStatus | undefined {
    const on = this.opts.network;
    if (!on) return undefined;
    const network = on.name;
    const base = { network, interface: HOST_PORT_IF_NAME, netns: this.opts.hostNetnsPath };
    const rec = this.opts.attacher().row();
    if (!this.opts.enabled && !rec)
      return { ...base, state: 'off', ...UNATTACHED, reason: 'dpu.hostPort is false' };
    if (!rec) return { ...base, state: 'pending', ...UNATTACHED, reason: this.reason };
    const dpu = dpuOf(rec);
    const degraded = on.backend.attachmentState?.(toView(rec)) === 'degraded';
    return {
      ...base,
      state: 'attached',
      addresses: rec.ips.map((i) => i.address),
      dpu,
      routes: opts.routes === false ? [] : (rec.routes ?? []),
      routeCount: rec.routes?.length ?? 0,
      reason: !this.opts.enabled
        ? `dpu.hostPort is false; attached earlier, it stays until detached (detach ${HOST_PORT_WORKLOAD_ID})`
        : degraded
          ? `its DPU ${dpu} is away; the host port stays on it (detach ${HOST_PORT_WORKLOAD_ID} to move it)`
          : this.waiting
            ? this.waiting
            : this.missingSince
              ? `${HOST_PORT_IF_NAME} is missing from the host namespace; programmed again in place if it still is`
              : '',
    };
  }

  private async ensure(): Promise<void> {
    const network = this.opts.network;
    if (!network) return;
    const attacher = this.opts.attacher();
    const rec = attacher.row();
    if (rec) return this.keep(network, attacher, rec);
    const carriers = this.opts.carriers();
    if (carriers.length === 0) return this.pending('no DPU of this node carries the fabric yet');
    // The namespace first: a host that cannot be opened asks nothing of the backend.
    const netns = await this.opts.openHost().catch((err: unknown) => {
      throw new Error(`cannot open the host namespace: ${asWorkloadNetError(err).message}`);
    });
    let placed: Placement | string;
    try {
      placed = await this.place(network, carriers);
      if (typeof placed === 'string')
        return this.pending(
          `none of the DPUs carrying the fabric (${carriers.join(', ')}) can take it${placed ? `: ${placed}` : ''}`,
        );
      await attacher.attach(
        { netnsPath: netns.path, ifName: HOST_PORT_IF_NAME, network: network.name, dpu: placed.dpu },
        netns,
        this.opts.routes(),
      );
    } finally {
      netns.close();
    }
    this.reason = '';
    const now = attacher.row();
    this.opts.log.info(
      { dpu: placed.dpu, ips: now?.ips.map((i) => i.address), routes: now?.routes },
      'host port attached',
    );
  }

  /**
   * A recorded host port stays. Only its interface missing from the host namespace while its DPU is
   * connected and synced, on two passes in a row, is taken as its port being dead (the namespace is the
   * node's: it cannot be gone); its port is then programmed again in place, under its recorded address.
   */
  private async keep(network: Network, attacher: HostPortAttacher, rec: AttachmentRecord): Promise<void> {
    this.reason = '';
    this.waiting = '';
    if (network.backend.attachmentState?.(toView(rec)) === 'degraded') {
      this.missingSince = undefined;
      return;
    }
    const drift = await attacher.check().catch(() => [] as Drift[]);
    if (!drift.some((d) => d.kind === 'interface-missing')) {
      this.missingSince = undefined;
      return;
    }
    // A DPU resyncing re-plumbs its re-created VFs as their acks come in: the interface is on its way
    // back, and its absence is no evidence (nor is a DPU whose state cannot be read).
    this.waiting = await this.resyncing(network, dpuOf(rec));
    if (this.waiting) {
      this.missingSince = undefined;
      return;
    }
    if (this.missingSince !== rec.createdAt) {
      this.missingSince = rec.createdAt;
      return;
    }
    this.missingSince = undefined;
    this.opts.log.warn(
      { dpu: dpuOf(rec), ips: rec.ips.map((i) => i.address) },
      `${HOST_PORT_IF_NAME} is missing from the host namespace while its DPU is connected and synced; programming its port again in place`,
    );
    await this.repair(network, attacher, rec);
  }

  /** Why its DPU's word is awaited before a missing interface counts; empty when it need not be. */
  private async resyncing(network: Network, dpu: string): Promise<string> {
    let health: BackendHealth;
    try {
      health = await network.backend.health();
    } catch (err) {
      return `${HOST_PORT_IF_NAME} is missing, and whether its DPU ${dpu} is resyncing cannot be told (${asWorkloadNetError(err).message}); it is left as recorded`;
    }
    const row = health.dpus?.find((d) => d.id === dpu);
    return row && !row.synced
      ? `its DPU ${dpu} is resyncing (connected, its snapshot not applied yet); ${HOST_PORT_IF_NAME} comes back as its port is acked`
      : '';
  }

  /**
   * Programs the recorded host port again where it is (as the start-up reconcile repairs a pod): the
   * same row, DPU and address, the row then naming what was programmed, so that later checks, a
   * Detach and a restart look for the VF it has now. A Detach that removed the row meanwhile gets its
   * port removed again.
   */
  private async repair(network: Network, attacher: HostPortAttacher, rec: AttachmentRecord): Promise<void> {
    const backend = network.backend;
    const netns = await this.opts.openHost().catch((err: unknown) => {
      throw new Error(`cannot open the host namespace: ${asWorkloadNetError(err).message}`);
    });
    let dataplane: DataplaneResult;
    try {
      if (netns.inode !== rec.netnsInode)
        throw new Error(
          `the host namespace ${netns.path} is not the one ${HOST_PORT_IF_NAME} was recorded in (inode ${netns.inode}, recorded ${rec.netnsInode}); detach ${HOST_PORT_WORKLOAD_ID} to attach it anew`,
        );
      const spec = { ...toSpec(rec), netns };
      dataplane = await backend.attach(spec, rec.dataplane ?? backend.plan(spec));
    } finally {
      netns.close();
    }
    if (!(await attacher.repaired(rec, dataplane))) {
      // A row attached anew meanwhile has its own port; only one that is gone leaves this one behind.
      if (!attacher.row()) await backend.detach(toView({ ...rec, dataplane }));
      return;
    }
    this.opts.log.info(
      { dpu: dpuOf(rec), ips: rec.ips.map((i) => i.address) },
      'host port programmed again in place',
    );
  }

  /**
   * Where the host port goes: the usual placement when it picks a DPU that carries the fabric, else the
   * first carrier that can take it (a DPU that does not carry the fabric is no path into the overlay);
   * when none can, the last refusal.
   */
  private async place(network: Network, carriers: string[]): Promise<Placement | string> {
    const place = network.backend.place?.bind(network.backend);
    if (!place) return `the ${network.backend.name} backend places no ports`;
    const req = { workloadId: HOST_PORT_WORKLOAD_ID, ifName: HOST_PORT_IF_NAME, network: network.name };
    let last = '';
    for (const dpu of [undefined, ...carriers]) {
      try {
        const placed = await place({ ...req, dpu });
        if (placed.endpoint) return placed;
      } catch (err) {
        last = asWorkloadNetError(err).message;
      }
    }
    return last;
  }

  private pending(reason: string): void {
    if (reason !== this.reason) this.opts.log.warn({ reason }, 'host port not attached');
    this.reason = reason;
  }
}

const UNATTACHED = { addresses: [], dpu: '', routes: [], routeCount: 0 };

/** The DPU agent holding a recorded port: its fabric endpoint, else the agent its backend recorded. */
function dpuOf(rec: AttachmentRecord): string {
  const agent = rec.dataplane?.details?.agentId;
  return rec.endpoint || (typeof agent === 'string' ? agent : '');
}

/** inversify identifier of the HostPort. */
export const HOST_PORT = Symbol.for('workloadnet.HostPort');
