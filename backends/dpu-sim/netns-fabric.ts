import type { Logger } from 'pino';
import {
  AF_BRIDGE,
  AF_INET,
  AF_INET6,
  IPV4_DEVCONF_FORWARDING,
  IPV4_DEVCONF_RP_FILTER,
  NTF_SELF,
  NUD_PERMANENT,
  NetlinkError,
  RTN_UNICAST,
  RTPROT_WORKLOADNET,
  RT_TABLE_MAIN,
  canonicalAddress,
  delLinkRequest,
  delNeighbourRequest,
  delRouteRequest,
  getLink,
  listAddresses,
  listLinks,
  listNeighbours,
  listRoutes,
  lookupRoute,
  newLinkRequest,
  newNeighbourRequest,
  newRouteRequest,
  setLinkRequest,
  vxlanInfoData,
  type Link,
  type NetlinkRequest,
  type NetlinkSocket,
  type Route,
} from '../../lib/rtnetlink';
import type { LocalVtep, PeerState } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricDataplane, FabricOutcome, Uplink } from './dataplane';
import type { FabricTable } from './fabric-table';
import { discoverUplink } from './uplink';
import { dependentsOf, routeKey, wantsOf, type Wanted } from './vxlan-programming';

// The fabric in the DPU namespace, programmed through rtnetlink as vxlan-programming.ts describes: our
// own VXLAN device wn-vxlan, one FDB entry per peer, one neighbour and one route per remote prefix, an
// unreachable route per local prefix. What is "ours" is narrow: routes of our protocol in the main
// table, and entries on our own device. A change touches only the objects of the name that changed
// (and of what depends on it); a complete snapshot prunes objects of ours nobody wants. A restart
// adopts the device as it is (a new one would drop packets and every entry on it).

export const VXLAN_DEVICE = 'wn-vxlan';
export const VXLAN_ALIAS = 'workloadnet fabric';
/** rp_filter "loose" on wn-vxlan: a Linux node's own traffic arrives with its underlay address as source. */
const RP_FILTER_LOOSE = 2;

/** How long a looked-up underlay route stands for the kernel's (see underlayRoute()). */
const UNDERLAY_ROUTE_TTL_MS = 5000;

const NUD_INCOMPLETE = 0x01;
const NUD_FAILED = 0x20;

function isGone(err: unknown): boolean {
  return err instanceof NetlinkError && err.notFound;
}

function describe(w: Wanted): string {
  if (w.kind === 'fdb') return `fdb ${w.mac} dst ${w.dst}`;
  if (w.kind === 'neighbour') return `neighbour ${w.dst} lladdr ${w.mac}`;
  return `route ${w.destination}${w.gateway ? ` via ${w.gateway}` : ''} metric ${w.priority}`;
}

function fingerprint(w: Wanted): string {
  return JSON.stringify(w);
}

export class NetnsFabric implements FabricDataplane {
  private vxlan: Link | undefined;
  /** Kernel objects each fabric object has in the kernel now, by key. */
  private readonly programmed = new Map<string, Map<string, Wanted>>();
  /** Which object holds each key. */
  private readonly owners = new Map<string, string>();
  /** Keys of routes of our protocol in the kernel (a route we may replace, not a foreign one). */
  private readonly ourRoutes = new Set<string>();
  /** Why an object is not (fully) programmed: the last error, or what it waits for. */
  private readonly errors = new Map<string, string>();
  /** Routes to peers' underlay addresses, and when each was looked up (performance.now()). */
  private readonly underlayRoutes = new Map<string, { at: number; route: Route | undefined }>();

  private constructor(
    private readonly sock: NetlinkSocket,
    private readonly log: Logger,
    private readonly vtepAddress: string | undefined,
  ) {}

  static async open(sock: NetlinkSocket, log: Logger, vtepAddress?: string): Promise<NetnsFabric> {
    const f = new NetnsFabric(sock, log, vtepAddress);
    for (const family of [AF_INET, AF_INET6] as const)
      for (const r of await listRoutes(sock, family, { table: RT_TABLE_MAIN, protocol: RTPROT_WORKLOADNET }))
        f.ourRoutes.add(routeKey(r.family, r.destination, r.priority ?? 0));
    const dev = await getLink(sock, { name: VXLAN_DEVICE });
    if (dev?.kind === 'vxlan') f.vxlan = dev;
    return f;
  }

  uplink(): Promise<Uplink> {
    return discoverUplink(this.sock, this.vtepAddress);
  }

  async apply(table: FabricTable, name: string, kind: string | undefined): Promise<FabricOutcome> {
    let deviceError: string | undefined;
    let names = [name, ...dependentsOf(table, name, kind)];
    if (kind === 'vtep') {
      const before = this.vxlan?.index;
      try {
        await this.ensureDevice(table.get(name)?.localVtep);
      } catch (err) {
        deviceError = (err as Error).message;
        this.log.warn({ err: deviceError }, 'the fabric device could not be programmed');
      }
      // A new device (or none) holds none of the entries the old one held.
      if (this.vxlan?.index !== before) {
        for (const n of [...this.programmed.keys()]) this.forgetDeviceObjects(n);
        names = [name, ...table.names().filter((n) => n !== name)];
      }
    }
    let outcome: FabricOutcome = { code: 'ok', message: '' };
    for (const n of names) {
      const o = await this.converge(table, n);
      if (n === name) outcome = o;
    }
    if (deviceError !== undefined) {
      this.errors.set(name, deviceError);
      return { code: 'failed', message: deviceError };
    }
    return outcome;
  }

  /** The device died with its entries (and routes over it): they are no longer ours to delete. */
  private forgetDeviceObjects(name: string): void {
    const map = this.programmed.get(name);
    if (!map) return;
    for (const [key, w] of map) {
      if (w.kind === 'route' && !w.overVxlan) continue;
      map.delete(key);
      this.owners.delete(key);
      if (w.kind === 'route') this.ourRoutes.delete(key);
    }
  }

  /** Makes the kernel hold exactly what `name` wants now. */
  private async converge(table: FabricTable, name: string): Promise<FabricOutcome> {
    const wants = wantsOf(table, name);
    const before = this.programmed.get(name) ?? new Map<string, Wanted>();
    const next = new Map<string, Wanted>();
    let blocked = wants.blocked;
    let conflict = wants.conflict ?? false;
    const vx = this.vxlan?.index;
    for (const w of wants.objects) {
      const owner = this.owners.get(w.key);
      if (owner !== undefined && owner !== name) {
        blocked = `${describe(w)} is already programmed for ${owner}`;
        conflict = true;
        next.clear();
        break;
      }
      if (w.kind !== 'route' || w.overVxlan) {
        if (vx === undefined) {
          blocked ??= 'waiting for the local VTEP (object "vtep")';
          next.clear();
          break;
        }
      }
      next.set(w.key, w);
    }
    const adds: Wanted[] = [...next.values()].filter(
      (w) => before.get(w.key) === undefined || fingerprint(before.get(w.key)!) !== fingerprint(w),
    );
    const dels: Wanted[] = [...before.values()].filter((w) => !next.has(w.key));
    // Entries before the routes that use them; routes removed before the entries they use.
    const order = (w: Wanted): number => (w.kind === 'route' ? 1 : 0);
    adds.sort((a, b) => order(a) - order(b));
    dels.sort((a, b) => order(b) - order(a));
    const failures: string[] = [];
    for (const w of dels) {
      try {
        await this.sock.request(this.deleteRequest(w));
      } catch (err) {
        if (!isGone(err)) {
          failures.push(`remove ${describe(w)}: ${(err as Error).message}`);
          continue;
        }
      }
      before.delete(w.key);
      this.owners.delete(w.key);
      if (w.kind === 'route') this.ourRoutes.delete(w.key);
    }
    for (const w of adds) {
      try {
        await this.sock.request(this.addRequest(w));
      } catch (err) {
        const foreign =
          err instanceof NetlinkError && err.code === 'EEXIST' && w.kind === 'route'
            ? ' (a route that is not ours holds it; left alone)'
            : '';
        failures.push(`${describe(w)}: ${(err as Error).message}${foreign}`);
        next.delete(w.key);
        continue;
      }
      this.owners.set(w.key, name);
      if (w.kind === 'route') this.ourRoutes.add(w.key);
    }
    // What could not be removed is still ours to remove later.
    for (const [key, w] of before) if (!next.has(key) && this.owners.get(key) === name) next.set(key, w);
    if (next.size > 0) this.programmed.set(name, next);
    else this.programmed.delete(name);
    if (failures.length > 0) {
      const message = failures.join('; ');
      this.errors.set(name, message);
      this.log.warn({ object: name, err: message }, 'fabric object programming failed');
      return { code: 'failed', message };
    }
    if (blocked !== undefined && table.get(name)) {
      this.errors.set(name, blocked);
      this.log.debug({ object: name, blocked }, 'fabric object not programmed');
      return conflict ? { code: 'invalid', message: blocked } : { code: 'ok', message: '' };
    }
    this.errors.delete(name);
    return { code: 'ok', message: '' };
  }

  private addRequest(w: Wanted): NetlinkRequest {
    const vx = this.vxlan?.index ?? 0;
    if (w.kind === 'fdb')
      return newNeighbourRequest(
        { family: AF_BRIDGE, ifindex: vx, mac: w.mac, dst: w.dst, flags: NTF_SELF, state: NUD_PERMANENT },
        { replace: true },
      );
    if (w.kind === 'neighbour')
      return newNeighbourRequest(
        { family: w.family, ifindex: vx, dst: w.dst, mac: w.mac, state: NUD_PERMANENT },
        { replace: true },
      );
    // Replace only a route of ours; a create is exclusive, so a foreign route is never overwritten.
    return newRouteRequest(
      {
        destination: w.destination,
        family: w.family,
        gateway: w.gateway,
        oif: w.overVxlan ? vx : undefined,
        type: w.type,
        priority: w.priority,
        protocol: RTPROT_WORKLOADNET,
        table: RT_TABLE_MAIN,
        onlink: w.onlink,
        mtu: w.mtu,
      },
      { replace: this.ourRoutes.has(w.key) },
    );
  }

  private deleteRequest(w: Wanted): NetlinkRequest {
    const vx = this.vxlan?.index ?? 0;
    if (w.kind === 'fdb')
      return delNeighbourRequest({ family: AF_BRIDGE, ifindex: vx, mac: w.mac, dst: w.dst, flags: NTF_SELF });
    if (w.kind === 'neighbour') return delNeighbourRequest({ family: w.family, ifindex: vx, dst: w.dst });
    return delRouteRequest({
      destination: w.destination,
      family: w.family,
      priority: w.priority,
      protocol: RTPROT_WORKLOADNET,
      table: RT_TABLE_MAIN,
    });
  }

  /**
   * Our device as the LocalVtep describes it: adopted as it is when its fixed settings match (only MTU,
   * MAC and up are changed in place), created when missing, recreated only when the VTEP itself changed
   * (VNI, port, address). No LocalVtep: the DPU carries no fabric, and the device goes.
   */
  private async ensureDevice(v: LocalVtep | undefined): Promise<void> {
    const links = await listLinks(this.sock);
    const existing = links.find((l) => l.name === VXLAN_DEVICE);
    if (existing && existing.kind !== 'vxlan')
      throw new Error(
        `an interface named ${VXLAN_DEVICE} exists and is a ${existing.kind ?? 'device of unknown kind'}, not our VXLAN device`,
      );
    if (!v) {
      if (existing) {
        await this.sock.request(delLinkRequest({ index: existing.index })).catch((err: unknown) => {
          if (!isGone(err)) throw err;
        });
        this.log.info({ device: VXLAN_DEVICE }, 'the local VTEP was deleted: removed the fabric device');
      }
      this.vxlan = undefined;
      return;
    }
    const foreign = links.find(
      (l) => l.name !== VXLAN_DEVICE && l.kind === 'vxlan' && l.vxlan?.port === v.port,
    );
    if (foreign)
      throw new Error(
        `UDP port ${v.port} is already used by VXLAN device ${foreign.name}, which is not ours`,
      );
    const address = canonicalAddress(v.address);
    const holder = (await listAddresses(this.sock)).find((a) => canonicalAddress(a.address) === address);
    if (!holder) throw new Error(`the VTEP address ${v.address} is on no interface of the DPU namespace`);
    const mac = v.mac.toLowerCase();
    if (existing) {
      const x = existing.vxlan;
      const mismatch = !x
        ? 'no VXLAN settings reported'
        : x.vni !== v.vni
          ? `VNI ${x.vni} instead of ${v.vni}`
          : x.port !== v.port
            ? `port ${x.port} instead of ${v.port}`
            : x.local === undefined || canonicalAddress(x.local) !== address
              ? `local ${x.local ?? 'unset'} instead of ${address}`
              : x.link !== holder.index
                ? `underlay device ${x.link ?? 'unset'} instead of ${holder.index}`
                : x.learning
                  ? 'learning on'
                  : undefined;
      if (mismatch === undefined) {
        if (existing.mtu !== v.mtu || existing.mac !== mac || !existing.up || existing.alias !== VXLAN_ALIAS)
          await this.sock.request(
            setLinkRequest({ index: existing.index }, { mtu: v.mtu, mac, up: true, alias: VXLAN_ALIAS }),
          );
        await this.tuneDevice(existing.index);
        this.vxlan = (await getLink(this.sock, { index: existing.index })) ?? existing;
        this.log.info({ device: VXLAN_DEVICE, ifindex: existing.index }, 'fabric device adopted');
        return;
      }
      // The VTEP itself changed: only a new device has the new settings.
      this.log.warn(
        { device: VXLAN_DEVICE, why: mismatch },
        'the local VTEP changed: recreating the fabric device',
      );
      await this.sock.request(delLinkRequest({ index: existing.index }));
    }
    await this.sock.request(
      newLinkRequest({
        name: VXLAN_DEVICE,
        kind: 'vxlan',
        mtu: v.mtu,
        mac,
        alias: VXLAN_ALIAS,
        up: true,
        infoData: vxlanInfoData({
          vni: v.vni,
          port: v.port,
          local: address,
          link: holder.index,
          learning: false,
        }),
      }),
    );
    const link = await getLink(this.sock, { name: VXLAN_DEVICE });
    if (!link) throw new Error(`${VXLAN_DEVICE} was created but cannot be read back`);
    await this.tuneDevice(link.index);
    this.vxlan = link;
    this.log.info(
      { device: VXLAN_DEVICE, ifindex: link.index, vni: v.vni, local: address },
      'fabric device created',
    );
  }

  /** Forwarding on the device, and loose reverse-path filtering (see RP_FILTER_LOOSE). */
  private async tuneDevice(index: number): Promise<void> {
    await this.sock.request(
      setLinkRequest(
        { index },
        { inetConf: { [IPV4_DEVCONF_FORWARDING]: 1, [IPV4_DEVCONF_RP_FILTER]: RP_FILTER_LOOSE } },
      ),
    );
  }

  async prune(table: FabricTable): Promise<void> {
    if (!table.vtep() && this.vxlan) await this.apply(table, 'vtep', 'vtep');
    const stray: Array<{ what: string; request: NetlinkRequest }> = [];
    for (const family of [AF_INET, AF_INET6] as const)
      for (const r of await listRoutes(this.sock, family, {
        table: RT_TABLE_MAIN,
        protocol: RTPROT_WORKLOADNET,
      })) {
        const key = routeKey(r.family, r.destination, r.priority ?? 0);
        if (this.owners.has(key)) continue;
        this.ourRoutes.delete(key);
        stray.push({
          what: `route ${r.destination} metric ${r.priority ?? 0}`,
          request: delRouteRequest({
            destination: r.destination,
            family: r.family,
            priority: r.priority,
            protocol: RTPROT_WORKLOADNET,
            table: RT_TABLE_MAIN,
          }),
        });
      }
    const vx = this.vxlan?.index;
    if (vx !== undefined) {
      for (const family of [AF_INET, AF_INET6] as const)
        for (const n of await listNeighbours(this.sock, family, { ifindex: vx })) {
          if ((n.state & NUD_PERMANENT) === 0 || n.dst === undefined) continue;
          if (this.owners.has(`neighbour|${family}|${n.dst}`)) continue;
          stray.push({
            what: `neighbour ${n.dst}`,
            request: delNeighbourRequest({ family, ifindex: vx, dst: n.dst }),
          });
        }
      for (const f of await listNeighbours(this.sock, AF_BRIDGE, { ifindex: vx })) {
        if (f.mac === undefined) continue;
        const owner = this.owners.get(`fdb|${f.mac}`);
        const want = owner === undefined ? undefined : this.programmed.get(owner)?.get(`fdb|${f.mac}`);
        if (want?.kind === 'fdb' && want.dst === f.dst) continue;
        stray.push({
          what: `fdb ${f.mac} dst ${f.dst ?? '?'}`,
          request: delNeighbourRequest({
            family: AF_BRIDGE,
            ifindex: vx,
            mac: f.mac,
            dst: f.dst,
            flags: NTF_SELF,
          }),
        });
      }
    }
    for (const s of stray) {
      try {
        await this.sock.request(s.request);
        this.log.info({ object: s.what }, 'removed a fabric object no longer wanted');
      } catch (err) {
        if (!isGone(err))
          this.log.warn(
            { object: s.what, err: (err as Error).message },
            'could not remove a stale fabric object',
          );
      }
    }
  }

  /**
   * The kernel's route to a peer's underlay address, looked up again once it is UNDERLAY_ROUTE_TTL_MS
   * old: a PeerStatus follows every change, and at 5,000 peers one lookup per peer each time was most
   * of what a change cost this process. A peer new to the table is looked up at once.
   */
  private async underlayRoute(address: string): Promise<Route | undefined> {
    const now = performance.now();
    const seen = this.underlayRoutes.get(address);
    if (seen && now - seen.at < UNDERLAY_ROUTE_TTL_MS) return seen.route;
    const route = await lookupRoute(this.sock, address).catch(() => undefined);
    this.underlayRoutes.set(address, { at: now, route });
    return route;
  }

  /**
   * What the DPU can honestly say about each peer. reachable: its FDB entry is in the kernel on our
   * device, the underlay has a route to its address, and the next hop of that route is not known to
   * be dead (no FAILED or INCOMPLETE neighbour entry). That is "the path is programmed and nothing
   * says it is broken", not a probe of the peer: a kernel VXLAN device keeps no per-remote state to
   * prove more (with learning off, receiving does not touch the FDB). offloaded: false, always: this is
   * the kernel's software path, not an eswitch. Packets: 0, because the kernel counts per device
   * (ip -s link show wn-vxlan), not per remote; a real DPU counts per flow.
   */
  async peerStates(table: FabricTable): Promise<PeerState[]> {
    const vx = this.vxlan?.index;
    const fdb = vx === undefined ? [] : await listNeighbours(this.sock, AF_BRIDGE, { ifindex: vx });
    const neigh = new Map<string, number>();
    for (const family of [AF_INET, AF_INET6] as const)
      for (const n of await listNeighbours(this.sock, family))
        if (n.dst !== undefined) neigh.set(`${n.ifindex}|${n.dst}`, n.state);
    // A set, not a scan per peer: 5,000 peers against 5,000 entries is 25 million comparisons.
    const entries = new Set(fdb.map((f) => `${f.mac ?? ''}|${f.dst ?? ''}`));
    const out: PeerState[] = [];
    const peers = table.peers();
    // Addresses of peers that left are not looked up again.
    if (this.underlayRoutes.size > 2 * peers.length) {
      const wanted = new Set(peers.map((o) => o.peer!.address));
      for (const a of this.underlayRoutes.keys()) if (!wanted.has(a)) this.underlayRoutes.delete(a);
    }
    for (const o of peers) {
      const p = o.peer!;
      let why = this.errors.get(o.name);
      if (why === undefined && !entries.has(`${p.mac.toLowerCase()}|${canonicalAddress(p.address)}`))
        why = `its FDB entry (${p.mac} dst ${p.address}) is not on ${VXLAN_DEVICE}`;
      if (why === undefined) {
        const route = await this.underlayRoute(p.address);
        if (!route || route.type !== RTN_UNICAST) why = `no underlay route to ${p.address}`;
        else {
          const hop = route.gateway ?? canonicalAddress(p.address);
          const state = neigh.get(`${route.oif ?? 0}|${hop}`);
          if (state !== undefined && (state & (NUD_FAILED | NUD_INCOMPLETE)) !== 0)
            why = `the underlay next hop ${hop} does not answer`;
        }
      }
      out.push({
        name: o.name,
        reachable: why === undefined,
        offloaded: false,
        txPackets: 0,
        rxPackets: 0,
        lastError: this.errors.get(o.name) ?? why ?? '',
      });
    }
    return out;
  }
}
