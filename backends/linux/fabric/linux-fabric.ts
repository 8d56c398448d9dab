// The Linux backend's part of the fabric (core/fabric-dataplane.ts), in the backend's host
// namespace: finds the underlay, keeps our VXLAN device, and makes the kernel hold one route per remote
// prefix (plus a neighbour and an FDB entry per VXLAN peer, plus the catch-all) and nothing else of
// ours. A periodic pass and a netlink monitor put back what someone removes by hand; the monitor is
// started again whenever it ends (restarting-reader.ts), and a converge that fails is tried again after
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
import { failedPrecondition } from '../../../core/errors';
import { silentLogger, type Logger } from '../../../core/logger';
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
import { AF_INET, AF_INET6, NetlinkSocket, type Link } from '../../../lib/rtnetlink';
import { concernsFabric } from './drift-relevance';
import { ownGatewayKeys } from './plan/gateway-keys';
import { planHostFabric } from './plan/host-plan';
import { probeTargets } from './plan/probe-targets';
import { underlayPodMtu } from './plan/route-mtu';
import type { FabricPlan } from './plan/wanted';
import { syncGatewayAddresses } from './gateway-address';
import { holdersInKernel, type Holders } from './identity-claims';
import { IcmpProbeTransport } from './icmp-probe-transport';
import { PeerProber, type ProbeTransport } from './peer-prober';
import { discoverUnderlay } from './underlay';
import { followUplinkMtu } from './uplink-mtu';
import { deviceRefused, fabricDevice, findFabricDevice } from './vxlan-device';
import { localNode, validateFabricSettings, type Prepared } from './prepared-fabric';
import { RepairSchedule } from './repair-schedule';
import { SourceFilterSwitch } from './source-filter-switch';
import { vtepMac } from '../../../lib/vtep-mac';

export interface LinuxFabricOptions {
  /** The host namespace (default: the process's own). */
  hostNetnsPath?: string;
  logger?: Logger;
  /** Full converge period (default 60 s). */
  convergeIntervalMs?: number;
  /** Repair drift as soon as the kernel reports it (default true). */
  monitor?: boolean;
  /** The nft binary of the VXLAN source filter (default `nft` on PATH). */
  nftCommand?: string;
  /** How probes are sent (default ICMP echo in the host namespace); tests give their own. */
  probeTransport?: (ns: NetnsHandle) => ProbeTransport;
}

const EMPTY_REPORT: FabricReport = {
  ready: false,
  reasons: ['the fabric has not been applied yet'],
  peers: [],
  objects: { routes: 0, neighbours: 0, fdb: 0 },
  repairs: 0,
};

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
  private readonly repairSchedule: RepairSchedule;
  private stopped = false;
  private readonly logger: Logger;
  private readonly filter: SourceFilterSwitch;
  /** The data-path probes, while fabric.probeIntervalSeconds is above 0 and peers are programmed. */
  private prober: PeerProber | undefined;
  private readonly probeListeners: Array<(node: string) => void> = [];
  private readonly localListeners: Array<(local: LocalNode) => void> = [];

  constructor(private readonly opts: LinuxFabricOptions = {}) {
    this.logger = opts.logger ?? silentLogger();
    this.filter = new SourceFilterSwitch(opts, this.logger);
    this.repairSchedule = new RepairSchedule({
      logger: this.logger,
      intervalMs: opts.convergeIntervalMs ?? 60_000,
      monitor: opts.monitor ?? true,
      converge: () => this.serial(() => this.converge()),
      applied: () => this.peers !== undefined,
      concerns: (e) =>
        concernsFabric(e, {
          vxlanIndex: this.prepared?.vxlan?.index,
          uplinkIndex: this.prepared?.underlay.uplink.index,
          programmed: this.programmed,
          direct: this.filter.direct,
          keysOnDevice: this.keysOnDevice.size > 0,
        }),
    });
  }

  async prepare(settings: FabricSettings): Promise<LocalNode> {
    validateFabricSettings(settings);
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
      if (!filter) await this.filter.remove(settings);
      this.prepared = { settings, underlay, vxlan, mac, routeMtu, filter };
      this.repairSchedule.start(this.ns);
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
      return this.converge();
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
    const filtered = this.prepared?.filter ? this.filter.filtered(!this.stopped) : undefined;
    if (filtered !== undefined) out.filteredPackets = filtered;
    const warnings = [this.filter.off, this.repairSchedule.down()].filter(
      (w): w is string => w !== undefined,
    );
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
    this.repairSchedule.cancel();
    await this.chain.catch(() => undefined);
    await this.filter.settled();
    await this.repairSchedule.stopMonitor();
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

  private async converge(): Promise<FabricReport> {
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
    if (prep.filter) await this.filter.apply(sock, prep, peers);
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
    // Every request succeeded: the kernel holds exactly the plan, so a second read (a dump of every
    // route, neighbour and FDB entry of ours) would tell nothing new.
    const after =
      failures.length === 0
        ? { routes: plan.routes, neighbours: plan.neighbours, fdb: plan.fdb }
        : await readOurs(sock, vxlanIndex);
    const reasons = [
      ...failures.map((f) => `${describe(f.op)}: ${f.error.message}`),
      ...keyFailures,
      ...(this.filter.refused !== undefined ? [this.filter.refused] : []),
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
