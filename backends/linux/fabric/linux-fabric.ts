// The Linux backend's part of the fabric (core/fabric/fabric-dataplane.ts), in the backend's host
// namespace: finds the underlay, keeps our VXLAN device, and makes the kernel hold one route per remote
// prefix (plus a neighbour and an FDB entry per VXLAN peer, plus the catch-all) and nothing else of
// ours. A periodic pass and a netlink monitor put back what someone removes by hand; the monitor is
// started again whenever it ends (restarting-reader.ts), and a reconcile that fails is tried again after
// a back-off rather than at the next periodic pass.
//
// The VXLAN device carries this node's gateway keys (gateway-address.ts), as flannel gives its device
// the .0/32 of the node's subnet: host → remote-pod traffic leaves with that source and passes strict
// rp_filter on the way back, and peers' probes (probe-schedule.ts) are answered by the kernel.

import type { Peer } from '../../../core/peer-source';
import type {
  FabricDataplane,
  FabricReport,
  FabricSettings,
  LocalNode,
  OwnPrefixes,
  PeerProbe,
} from '../../../core/fabric-dataplane';
import { failedPrecondition, invalidArgument } from '../../../core/errors';
import { silentLogger, type Logger } from '../../../core/logger';
import { parseCidr } from '../../../lib/cidr';
import {
  applyOps,
  diff,
  ensureVxlanDevice,
  fdbId,
  neighbourId,
  readOurs,
  routeId,
  type DiffOp,
} from '../../../lib/overlay';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import {
  AF_INET,
  AF_INET6,
  NetlinkSocket,
  RTM_DELADDR,
  RTM_DELLINK,
  RTM_DELNEIGH,
  RTM_DELROUTE,
  RTM_NEWLINK,
  RTM_NEWNEIGH,
  RTM_NEWROUTE,
  RTPROT_WORKLOADNET,
  type Link,
} from '../../../lib/rtnetlink';
import { DriftMonitor, KERNEL_EVENTS_LOST, type KernelEvent } from './drift-monitor';
import { RestartingReader } from '../restarting-reader';
import { ownGatewayKeys } from './plan/gateway-keys';
import { planHostFabric } from './plan/host-plan';
import { probeTargets } from './plan/probe-targets';
import { underlayPodMtu } from './plan/route-mtu';
import type { FabricPlan } from './plan/wanted';
import { syncGatewayAddresses } from './gateway-address';
import { holdersInKernel, type Holders } from './identity-claims';
import { IcmpProbeTransport } from './icmp-probe-transport';
import { PeerProber, type ProbeTransport } from './peer-prober';
import { discoverUnderlay, type Underlay } from './underlay';
import { followUplinkMtu } from './uplink-mtu';
import { deviceRefused, fabricDevice, findFabricDevice } from './vxlan-device';
import { FilterNotOursError, VxlanSourceFilter, nftRunner } from './vxlan-source-filter';
import { directNeighbourChanged, directSources, type DirectSources } from './direct-sources';
import { vtepMac } from '../../../lib/vtep-mac';

export interface LinuxFabricOptions {
  /** The host namespace (default: the process's own). */
  hostNetnsPath?: string;
  logger?: Logger;
  /** Full reconcile period (default 60 s). */
  reconcileIntervalMs?: number;
  /** Repair drift as soon as the kernel reports it (default true). */
  monitor?: boolean;
  /** The nft binary of the VXLAN source filter (default `nft` on PATH). */
  nftCommand?: string;
  /** How probes are sent (default ICMP echo in the host namespace); tests give their own. */
  probeTransport?: (ns: NetnsHandle) => ProbeTransport;
}

/** How often Status may make the source filter's counter be read again. */
const FILTER_COUNTER_MAX_AGE_MS = 1000;

/** Coalesces a burst of notifications (our own apply makes some) into one reconcile. */
const MONITOR_DEBOUNCE_MS = 100;

/** A failed reconcile is tried again after this, doubling per failure up to the maximum. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 10_000;

const EMPTY_REPORT: FabricReport = {
  ready: false,
  reasons: ['the fabric has not been applied yet'],
  peers: [],
  objects: { routes: 0, neighbours: 0, fdb: 0 },
  repairs: 0,
};

interface Prepared {
  settings: FabricSettings;
  underlay: Underlay;
  vxlan?: Link;
  mac?: string;
  routeMtu: number;
  /** The VXLAN source filter is to be programmed (a device runs and fabric.sourceFilter is on). */
  filter: boolean;
}

export class LinuxFabric implements FabricDataplane {
  private ns: NetnsHandle | undefined;
  private sock: NetlinkSocket | undefined;
  private prepared: Prepared | undefined;
  private peers: readonly Peer[] | undefined;
  /** This node's prefixes as the controller last gave them; undefined: not told (addresses left alone). */
  private own: OwnPrefixes | undefined;
  /** The gateway keys the last apply put on the device: putting one back later is a repair. */
  private keysOnDevice = new Set<string>();
  /** What the last apply put in (key → fingerprint): putting the same back later is a repair. */
  private programmed = new Map<string, string>();
  /**
   * Who held each identity (MAC, underlay address, gateway key, prefix) in the last plan: the planner
   * keeps it for them against a newcomer (identity-claims.ts). Empty after a start: then the first by name.
   */
  private holders: Holders | undefined;
  private last: FabricReport = EMPTY_REPORT;
  private repairs = 0;
  private chain: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private monitor: RestartingReader<DriftMonitor> | undefined;
  private debounce: NodeJS.Timeout | undefined;
  /** The next try of a reconcile that failed, and how long the one after it waits. */
  private retry: NodeJS.Timeout | undefined;
  private retryMs = RETRY_FIRST_MS;
  private stopped = false;
  private readonly logger: Logger;
  private readonly filter: VxlanSourceFilter;
  /** Why the source filter is not in force, while it is not. */
  private filterOff: string | undefined;
  /** Something with our names in our table is not ours: a reason the fabric is not ready. */
  private filterRefused: string | undefined;
  /** What the filter admits on hybrid's direct path, as last applied. */
  private direct: DirectSources | undefined;
  /** The data-path probes, while fabric.probeIntervalSeconds is above 0 and peers are programmed. */
  private prober: PeerProber | undefined;
  private readonly probeListeners: Array<(node: string) => void> = [];
  private readonly localListeners: Array<(local: LocalNode) => void> = [];

  constructor(private readonly opts: LinuxFabricOptions = {}) {
    this.logger = opts.logger ?? silentLogger();
    this.filter = new VxlanSourceFilter(
      nftRunner({ command: opts.nftCommand, netnsPath: opts.hostNetnsPath }),
    );
  }

  async prepare(settings: FabricSettings): Promise<LocalNode> {
    validate(settings);
    return this.serial(async () => {
      const sock = await this.socket();
      const underlay = await discoverUnderlay(sock, settings.nodeIp);
      let vxlan: Link | undefined;
      let mac: string | undefined;
      let routeMtu = underlayPodMtu(settings.mode, underlay);
      if (settings.mode === 'vxlan' || settings.mode === 'hybrid') {
        mac = vtepMac(underlay.address, settings.nodeName);
        const r = await ensureVxlanDevice(
          sock,
          fabricDevice({ vni: settings.vni, port: settings.port, mac, mtu: routeMtu }, underlay),
        ).catch(deviceRefused);
        vxlan = r.link;
        this.logger.info(
          { device: vxlan.name, ifindex: vxlan.index, outcome: r.outcome, why: r.why },
          'fabric VXLAN device ready',
        );
      } else {
        // No device in this mode; one left by an earlier mode is only cleaned of our entries.
        vxlan = await findFabricDevice(sock);
        routeMtu = underlay.uplink.mtu;
      }
      const filter = mac !== undefined && settings.sourceFilter !== false;
      if (!filter) await this.removeFilter(settings);
      this.prepared = { settings, underlay, vxlan, mac, routeMtu, filter };
      this.startRepairs();
      return localNode(this.prepared);
    });
  }

  /** Told this node as it is now when the uplink's MTU changed (uplink-mtu.ts). */
  onLocalChange(listener: (local: LocalNode) => void): void {
    this.localListeners.push(listener);
  }

  apply(peers: readonly Peer[], own?: OwnPrefixes): Promise<FabricReport> {
    return this.serial(async () => {
      this.peers = [...peers];
      if (own) this.own = own;
      return this.reconcile();
    });
  }

  report(): FabricReport {
    const out: FabricReport = { ...this.last, repairs: this.repairs };
    const health = this.prober?.health();
    if (health && health.size > 0)
      out.peers = out.peers.map((p) => {
        const probe = health.get(p.node);
        return probe ? { ...p, probe } : p;
      });
    if (this.prepared?.filter && !this.stopped) this.filter.refresh(FILTER_COUNTER_MAX_AGE_MS);
    if (this.prepared?.filter && this.filter.filtered !== undefined)
      out.filteredPackets = this.filter.filtered;
    const warnings = [this.filterOff, this.monitor?.down()].filter((w): w is string => w !== undefined);
    if (warnings.length > 0) out.warnings = warnings;
    return out;
  }

  probes(): ReadonlyMap<string, PeerProbe> {
    return this.prober?.health() ?? new Map<string, PeerProbe>();
  }

  onProbeChange(listener: (node: string) => void): void {
    this.probeListeners.push(listener);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.prober?.stop();
    this.prober = undefined;
    if (this.timer) clearInterval(this.timer);
    if (this.debounce) clearTimeout(this.debounce);
    if (this.retry) clearTimeout(this.retry);
    this.timer = undefined;
    await this.chain.catch(() => undefined);
    await this.filter.settled();
    await this.monitor?.stop();
    this.monitor = undefined;
    await this.sock?.close();
    this.sock = undefined;
    this.ns?.close();
    this.ns = undefined;
  }

  // ---- steps ----

  /** The device may have been deleted by hand; modes that run one bring it back (a new ifindex). */
  private async restoreDevice(sock: NetlinkSocket, prep: Prepared): Promise<void> {
    if (!prep.vxlan || prep.mac === undefined) return;
    const now = await findFabricDevice(sock);
    if (now?.index === prep.vxlan.index) return;
    const want = { vni: prep.settings.vni, port: prep.settings.port, mac: prep.mac, mtu: prep.routeMtu };
    const r = await ensureVxlanDevice(sock, fabricDevice(want, prep.underlay)).catch(deviceRefused);
    this.logger.warn(
      { ifindex: r.link.index, outcome: r.outcome },
      'fabric VXLAN device was gone; recreated',
    );
    prep.vxlan = r.link;
    this.repairs++;
  }

  private async reconcile(): Promise<FabricReport> {
    const prep = this.prepared;
    if (!prep) throw failedPrecondition('fabric: apply before prepare');
    const peers = this.peers;
    if (!peers) return this.report();
    const sock = await this.socket();
    await this.restoreDevice(sock, prep);
    await this.takeUplinkMtu(sock, prep);
    const vxlanIndex = prep.vxlan?.index;
    // The first apply of a start: the incumbents are what the last daemon left in the kernel.
    this.holders ??= holdersInKernel(await readOurs(sock, vxlanIndex), peers);
    const plan = planHostFabric(
      {
        mode: prep.settings.mode,
        underlay: prep.underlay,
        vxlanIndex: prep.mac !== undefined ? vxlanIndex : undefined,
        vni: prep.settings.vni,
        port: prep.settings.port,
        ownMac: prep.mac,
        routeMtu: prep.routeMtu,
        clusterCidrs: prep.settings.clusterCidrs,
        holders: this.holders,
      },
      peers,
    );
    this.holders = plan.holders;
    // Peers are admitted before routes to them exist (their answers must not be dropped), and a
    // withdrawn peer leaves the set only when the controller leaves it out of the table.
    if (prep.filter) await this.applyFilter(sock, prep, peers);
    // Before the routes are read: a key removed from the device can take routes with it (gateway-address.ts).
    const keyFailures = await this.syncKeys(sock, prep);
    const have = await readOurs(sock, vxlanIndex);
    const ops = diff(plan, have, vxlanIndex);
    const fingerprints = fingerprintsOf(plan);
    // Putting back what the last apply had put in, unchanged, is a repair.
    const repairing = ops.filter((op) => {
      const id = `${op.kind}|${op.key}`;
      return op.action !== 'delete' && this.programmed.get(id) === fingerprints.get(id);
    });
    // Known before the requests go out, so that the monitor hears our own changes as ours.
    this.programmed = fingerprints;
    const failures = await applyOps(sock, ops);
    const failed = new Set(failures.map((f) => f.op));
    const repaired = repairing.filter((op) => !failed.has(op)).length;
    this.repairs += repaired;
    for (const f of failures) this.programmed.delete(`${f.op.kind}|${f.op.key}`);
    if (ops.length > 0)
      this.logger.info(
        { changes: ops.length - failures.length, failed: failures.length, repaired },
        'fabric applied',
      );
    // Every request succeeded: the kernel holds exactly the plan, so a second read (a third of an
    // apply's time at 2,000 peers) would tell nothing new.
    const after =
      failures.length === 0
        ? { routes: plan.routes, neighbours: plan.neighbours, fdb: plan.fdb }
        : await readOurs(sock, vxlanIndex);
    const reasons = [
      ...failures.map((f) => `${describe(f.op)}: ${f.error.message}`),
      ...keyFailures,
      ...(this.filterRefused !== undefined ? [this.filterRefused] : []),
    ];
    this.probe(prep, plan);
    this.last = {
      ready: reasons.length === 0,
      reasons,
      peers: plan.peers,
      objects: { routes: after.routes.length, neighbours: after.neighbours.length, fdb: after.fdb.length },
      repairs: this.repairs,
    };
    return this.report();
  }

  /**
   * Puts this node's gateway keys on the device and removes what is no longer one; left alone until
   * the controller says which prefixes are ours. Returns why it failed, if it did.
   */
  private async syncKeys(sock: NetlinkSocket, prep: Prepared): Promise<string[]> {
    const own = this.own;
    if ((!own?.keyRanges && !own?.keys) || !prep.vxlan || prep.mac === undefined) return [];
    const keys = own.keys
      ? { [AF_INET]: own.keys[4], [AF_INET6]: own.keys[6] }
      : ownGatewayKeys(own.keyRanges ?? [], [...own.byEndpoint.values()].flat());
    const r = await syncGatewayAddresses(sock, prep.vxlan.index, keys);
    const repaired = r.added.filter((a) => this.keysOnDevice.has(a)).length;
    this.repairs += repaired;
    if (r.added.length > 0 || r.removed.length > 0)
      this.logger.info({ added: r.added, removed: r.removed, repaired }, 'fabric gateway addresses changed');
    this.keysOnDevice = new Set(r.held);
    return r.failures.map(
      (f) => `${f.what} on ${prep.vxlan?.name ?? 'the VXLAN device'}: ${f.error.message}`,
    );
  }

  /** Gives the prober the peers as the plan reaches them (started at the first apply that has any). */
  private probe(prep: Prepared, plan: FabricPlan): void {
    const seconds = prep.settings.probeIntervalSeconds ?? 0;
    if (seconds <= 0 || this.stopped || !this.ns) return;
    if (!this.prober) {
      const ns = this.ns;
      this.prober = new PeerProber({
        intervalMs: seconds * 1000,
        transport: this.opts.probeTransport?.(ns) ?? new IcmpProbeTransport(ns, this.logger),
        // Monotonic, and finer than a millisecond: round trips on a LAN are a fraction of one.
        now: () => performance.now(),
        onChange: (node, probe) => {
          this.logger.info(
            { peer: node, state: probe.state, target: probe.target, lost: probe.lost },
            'fabric peer probe state changed',
          );
          for (const l of this.probeListeners) l(node);
        },
      });
      this.prober.start();
    }
    this.prober.setTargets(probeTargets(plan));
  }

  /**
   * Programs the source filter; a failure leaves the fabric unfiltered and is a warning, an object of
   * our name that is not ours a reason too.
   */
  private async applyFilter(sock: NetlinkSocket, prep: Prepared, peers: readonly Peer[]): Promise<void> {
    const port = prep.settings.port;
    this.filterRefused = undefined;
    try {
      this.direct =
        prep.settings.mode === 'hybrid'
          ? await directSources(sock, prep.underlay, peers, prep.settings.clusterCidrs)
          : undefined;
      await this.filter.apply(port, peers, { vni: prep.settings.vni, direct: this.direct });
      if (this.filterOff !== undefined) this.logger.info({}, 'VXLAN source filter in force');
      this.filterOff = undefined;
    } catch (err) {
      const notOurs = err instanceof FilterNotOursError;
      if (notOurs) this.filterRefused = err.message;
      const why =
        `VXLAN source filter off: ${(err as Error).message}; VXLAN packets are accepted from any source ` +
        `on UDP port ${port}` +
        (notOurs ? '' : ' (install nftables, or set fabric.sourceFilter to false)');
      if (why !== this.filterOff) this.logger.warn({ err: (err as Error).message }, why);
      this.filterOff = why;
    }
  }

  /**
   * No filter wanted (no VXLAN device in this mode, or fabric.sourceFilter off): our table goes, as
   * it would drop packets to the port for whatever listens there now. Only our own table is deleted.
   */
  private async removeFilter(settings: FabricSettings): Promise<void> {
    this.filterOff = undefined;
    this.filterRefused = undefined;
    this.direct = undefined;
    try {
      await this.filter.remove();
    } catch (err) {
      // Without nft there is no table of ours to remove either.
      this.logger.debug(
        { err: (err as Error).message, mode: settings.mode, sourceFilter: settings.sourceFilter },
        'VXLAN source filter not removed',
      );
    }
  }

  /** The uplink's MTU changed: the device and the routes of this pass take it, the controller hears. */
  private async takeUplinkMtu(sock: NetlinkSocket, prep: Prepared): Promise<void> {
    const was = await followUplinkMtu(sock, prep);
    if (was === undefined) return;
    const { uplink } = prep.underlay;
    this.logger.info(
      { uplink: uplink.name, was, mtu: uplink.mtu, routeMtu: prep.routeMtu },
      "fabric follows the uplink's new MTU",
    );
    for (const listener of this.localListeners) listener(localNode(prep));
  }

  private startRepairs(): void {
    if (this.timer === undefined) {
      this.timer = setInterval(
        () => this.scheduleReconcile('periodic'),
        this.opts.reconcileIntervalMs ?? 60_000,
      );
      this.timer.unref();
    }
    if (this.monitor === undefined && (this.opts.monitor ?? true) && this.ns) {
      const ns = this.ns;
      this.monitor = new RestartingReader({
        what: 'fabric drift monitor',
        meanwhile: 'the periodic reconcile still repairs',
        logger: this.logger,
        start: (died) =>
          DriftMonitor.start(
            ns,
            (e) => {
              if (this.concernsUs(e)) this.scheduleReconcile('monitor');
            },
            died,
          ),
        // What changed while no monitor listened is known only to a full reconcile.
        onRestart: () => this.scheduleReconcile('monitor'),
      });
      void this.monitor.begin();
    }
  }

  /**
   * Whether a notification may mean drift: one of the objects we put in is gone, a route of ours we
   * did not put in appeared, or our device went away. Our own changes (known in `programmed` before
   * they are sent) do not trigger a reconcile.
   */
  private concernsUs(e: KernelEvent): boolean {
    const vx = this.prepared?.vxlan?.index;
    switch (e.type) {
      case KERNEL_EVENTS_LOST:
        return true;
      case RTM_DELROUTE:
        return e.protocol === RTPROT_WORKLOADNET && e.id !== undefined && this.programmed.has(e.id);
      case RTM_NEWROUTE:
        return e.protocol === RTPROT_WORKLOADNET && e.id !== undefined && !this.programmed.has(e.id);
      case RTM_DELNEIGH:
        return vx !== undefined && e.ifindex === vx && e.id !== undefined && this.programmed.has(e.id);
      case RTM_NEWNEIGH:
        return directNeighbourChanged(this.direct, e);
      case RTM_DELLINK:
        return vx !== undefined && e.ifindex === vx;
      case RTM_NEWLINK:
        // The uplink's MTU may have changed (followUplinkMtu).
        return e.ifindex !== undefined && e.ifindex === this.prepared?.underlay.uplink.index;
      case RTM_DELADDR:
        return vx !== undefined && e.ifindex === vx && this.keysOnDevice.size > 0;
      default:
        return false;
    }
  }

  private scheduleReconcile(why: 'periodic' | 'monitor'): void {
    if (this.stopped || this.peers === undefined) return;
    if (why === 'monitor') {
      if (this.debounce) return;
      this.debounce = setTimeout(() => {
        this.debounce = undefined;
        this.runReconcile(why);
      }, MONITOR_DEBOUNCE_MS);
      this.debounce.unref();
      return;
    }
    this.runReconcile(why);
  }

  private runReconcile(why: string): void {
    if (this.stopped) return;
    this.serial(() => this.reconcile()).then(
      () => {
        this.retryMs = RETRY_FIRST_MS;
      },
      (err: unknown) => {
        // A repair must not wait for the periodic pass because one request was cut short (EINTR after
        // SIGSTOP/SIGCONT, a socket that timed out): it is tried again soon, less often while it fails.
        const delay = this.retryMs;
        this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2);
        this.logger.warn(
          { why, err: (err as Error).message, retryInMs: delay },
          'fabric reconcile failed; tried again',
        );
        if (this.retry || this.stopped) return;
        this.retry = setTimeout(() => {
          this.retry = undefined;
          this.runReconcile('retry');
        }, delay);
        this.retry.unref();
      },
    );
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.chain.then(fn, fn);
    this.chain = next.catch(() => undefined);
    return next;
  }

  private async socket(): Promise<NetlinkSocket> {
    if (this.sock) return this.sock;
    const path = this.opts.hostNetnsPath;
    const ns = path === undefined || path === '' ? NetnsHandle.own() : await NetnsHandle.open(path);
    try {
      this.sock = NetlinkSocket.openIn(ns);
    } catch (err) {
      ns.close();
      throw err;
    }
    this.ns = ns;
    return this.sock;
  }
}

function fingerprintsOf(plan: FabricPlan): Map<string, string> {
  const out = new Map<string, string>();
  for (const r of plan.routes)
    out.set(routeId(r), `${r.type}|${r.gateway ?? ''}|${r.oif ?? ''}|${r.onlink}|${r.mtu ?? ''}`);
  for (const n of plan.neighbours) out.set(neighbourId(n), n.mac);
  for (const f of plan.fdb) out.set(fdbId(f), f.dst);
  return out;
}

function describe(op: DiffOp): string {
  return `${op.action} ${op.what}`;
}

function validate(s: FabricSettings): void {
  if (!['routed', 'vxlan', 'hybrid', 'external'].includes(s.mode))
    throw invalidArgument(`fabric: mode "${String(s.mode)}" is not one of routed, vxlan, hybrid, external`);
  if (!Number.isInteger(s.vni) || s.vni < 1 || s.vni > 0xffffff)
    throw invalidArgument(`fabric: VNI must be an integer in 1..16777215, not ${s.vni}`);
  if (!Number.isInteger(s.port) || s.port < 1 || s.port > 0xffff)
    throw invalidArgument(`fabric: VXLAN port must be an integer in 1..65535, not ${s.port}`);
  for (const c of s.clusterCidrs) {
    try {
      parseCidr(c);
    } catch (err) {
      throw invalidArgument(`fabric: cluster CIDR: ${(err as Error).message}`);
    }
  }
}

/** This node as the fabric publishes it. */
function localNode(prep: Prepared): LocalNode {
  const local: LocalNode = {
    underlay: [prep.underlay.address],
    uplink: prep.underlay.uplink.name,
    mtu: prep.underlay.uplink.mtu,
    subnets: prep.underlay.subnets.map((s) => s.text),
  };
  if (prep.mac !== undefined)
    local.vtep = { mac: prep.mac, vni: prep.settings.vni, port: prep.settings.port };
  return local;
}
