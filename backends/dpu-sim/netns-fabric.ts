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
  newLinkRequest,
  newNeighbourRequest,
  newRouteRequest,
  setLinkRequest,
  vxlanInfoData,
  type Link,
  type NetlinkRequest,
  type NetlinkSocket,
} from '../../lib/rtnetlink';
import type { LocalVtep, PeerState } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricChange, FabricDataplane, FabricOutcome, Uplink } from './dataplane';
import { kindOf, type FabricTable } from './fabric-table';
import { sendInBatches } from './netlink-batches';
import { NetnsPeerView } from './netns-peer-view';
import { discoverUplink } from './uplink';
import { dependentsOf, routeKey, wantsOf, type Wanted } from './vxlan-programming';

// The fabric in the DPU namespace, programmed through rtnetlink as vxlan-programming.ts describes: our
// own VXLAN device wn-vxlan, one FDB entry per peer, one neighbour and one route per remote prefix, an
// unreachable route per local prefix. What is "ours" is narrow: routes of our protocol in the main
// table, and entries on our own device. A change touches only the objects of the name that changed
// (and of what depends on it); a complete snapshot prunes objects of ours nobody wants. A restart
// adopts the device as it is (a new one would drop packets and every entry on it).
//
// Objects that change together (a snapshot's burst, a new device that needs everything again) are
// converged together: their kernel requests go out a few hundred to a datagram (netlink-batches.ts),
// removals first, and the kernel answers each failing request with its own error, so every object
// still gets its own outcome.
//
// An object refused because another object holds its kernel object (one FDB entry per VTEP MAC, one
// route per prefix) waits for that one key: it is converged again the moment its holder gives the key
// up, in the same call that freed it (a later object of the same batch, a Delete, a move), and the
// agent is told (onHeldApplied). Never "at the next snapshot".

export const VXLAN_DEVICE = 'wn-vxlan';
export const VXLAN_ALIAS = 'workloadnet fabric';
/** rp_filter "loose" on wn-vxlan: a Linux node's own traffic arrives with its underlay address as source. */
const RP_FILTER_LOOSE = 2;

/** What converging one object takes: computed for every object of a batch before anything is sent. */
interface Plan {
  name: string;
  /** What it had programmed (the live map: removals are taken out of it as they succeed). */
  before: Map<string, Wanted>;
  next: Map<string, Wanted>;
  adds: Wanted[];
  dels: Wanted[];
  blocked: string | undefined;
  conflict: boolean;
  /** The key another object holds, that this one waits for. */
  waitsFor: string | undefined;
  failures: string[];
}

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
  /** Objects held back by another's key: name → that key. */
  private readonly waiting = new Map<string, string>();
  private heldListener: ((name: string, outcome: FabricOutcome) => void) | undefined;

  /** What PeerStatus says, from the kernel (told of every FDB entry confirmed). */
  private readonly peers: NetnsPeerView;

  private constructor(
    private readonly sock: NetlinkSocket,
    private readonly log: Logger,
    private readonly vtepAddress: string | undefined,
  ) {
    this.peers = new NetnsPeerView(sock, () => this.vxlan?.index);
  }

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

  async apply(table: FabricTable, changes: readonly FabricChange[]): Promise<FabricOutcome[]> {
    const deviceErrors = new Map<string, string>();
    // The names whose kernel objects may change, in the order they are planned (the first to want a
    // key gets it, as when they came one at a time).
    const names = new Set<string>();
    for (const { name, kind } of changes) {
      names.add(name);
      for (const n of dependentsOf(table, name, kind)) names.add(n);
      if (kind !== 'vtep') continue;
      const before = this.vxlan?.index;
      try {
        await this.ensureDevice(table.get(name)?.localVtep);
      } catch (err) {
        deviceErrors.set(name, (err as Error).message);
        this.log.warn({ err: (err as Error).message }, 'the fabric device could not be programmed');
      }
      // A new device (or none) holds none of the entries the old one held.
      if (this.vxlan?.index !== before) {
        for (const n of [...this.programmed.keys()]) this.forgetDeviceObjects(n);
        this.peers.deviceReplaced();
      }
    }
    const outcomes = await this.converge(table, [...names]);
    await this.convergeFreed(table, outcomes, new Set(changes.map((c) => c.name)));
    return changes.map(({ name }) => {
      const deviceError = deviceErrors.get(name);
      if (deviceError === undefined) return outcomes.get(name) ?? { code: 'ok', message: '' };
      this.errors.set(name, deviceError);
      return { code: 'failed', message: deviceError };
    });
  }

  onHeldApplied(listener: (name: string, outcome: FabricOutcome) => void): void {
    this.heldListener = listener;
  }

  /**
   * Converges again each object that waits for a key nobody holds now (with what depends on it), until
   * none is freed; `outcomes` takes their new outcomes, and the listener hears of those that are not
   * among `changed` (their ack went out with an earlier change).
   */
  private async convergeFreed(
    table: FabricTable,
    outcomes: Map<string, FabricOutcome>,
    changed: ReadonlySet<string>,
  ): Promise<void> {
    // Each round programs at least one waiting object or stops: bounded by the objects waiting.
    for (let rounds = this.waiting.size; rounds > 0; rounds--) {
      const names = new Set<string>();
      for (const [name, key] of this.waiting) {
        const o = table.get(name);
        if (!o) {
          this.waiting.delete(name);
          continue;
        }
        const owner = this.owners.get(key);
        if (owner !== undefined && owner !== name) continue;
        names.add(name);
        for (const n of dependentsOf(table, name, kindOf(o))) names.add(n);
      }
      if (names.size === 0) return;
      const before = this.waiting.size;
      const again = await this.converge(table, [...names]);
      again.forEach((outcome, name) => {
        outcomes.set(name, outcome);
        if (!changed.has(name) && this.heldListener && table.get(name)) this.heldListener(name, outcome);
      });
      if (this.waiting.size >= before) return;
      this.log.info(
        { objects: before - this.waiting.size },
        'fabric objects held back programmed: their key was freed',
      );
    }
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

  /** Makes the kernel hold exactly what each of `names` wants now; each one's outcome. */
  private async converge(table: FabricTable, names: readonly string[]): Promise<Map<string, FabricOutcome>> {
    const plans = this.plan(table, names);
    // Routes removed before the entries they use; entries added before the routes that use them.
    const order = (w: Wanted): number => (w.kind === 'route' ? 1 : 0);
    const dels = plans.flatMap((p) => p.dels.map((w) => ({ p, w }))).sort((a, b) => order(b.w) - order(a.w));
    const removed = await sendInBatches(
      this.sock,
      dels.map(({ w }) => this.deleteRequest(w)),
    );
    dels.forEach(({ p, w }, i) => {
      const o = removed[i]!;
      if (!o.ok && !isGone(o.error)) {
        p.failures.push(`remove ${describe(w)}: ${o.error.message}`);
        return;
      }
      p.before.delete(w.key);
      this.owners.delete(w.key);
      if (w.kind === 'route') this.ourRoutes.delete(w.key);
      if (w.kind === 'fdb') this.peers.fdbConfirmed(w.mac, w.dst, false);
    });
    const adds: Array<{ p: Plan; w: Wanted }> = [];
    for (const p of plans)
      for (const w of p.adds) {
        // Planned free because another object of the batch removes it; that removal failed.
        const owner = this.owners.get(w.key);
        if (owner !== undefined && owner !== p.name) {
          p.failures.push(`${describe(w)} is still programmed for ${owner}`);
          p.next.delete(w.key);
        } else adds.push({ p, w });
      }
    adds.sort((a, b) => order(a.w) - order(b.w));
    const added = await sendInBatches(
      this.sock,
      adds.map(({ w }) => this.addRequest(w)),
    );
    adds.forEach(({ p, w }, i) => {
      const o = added[i]!;
      if (!o.ok) {
        const foreign =
          o.error instanceof NetlinkError && o.error.code === 'EEXIST' && w.kind === 'route'
            ? ' (a route that is not ours holds it; left alone)'
            : '';
        p.failures.push(`${describe(w)}: ${o.error.message}${foreign}`);
        p.next.delete(w.key);
        return;
      }
      this.owners.set(w.key, p.name);
      if (w.kind === 'route') this.ourRoutes.add(w.key);
      if (w.kind === 'fdb') {
        // A replace moves the MAC's entry to its new destination.
        const was = p.before.get(w.key);
        if (was?.kind === 'fdb') this.peers.fdbConfirmed(was.mac, was.dst, false);
        this.peers.fdbConfirmed(w.mac, w.dst, true);
      }
    });
    const outcomes = new Map<string, FabricOutcome>();
    for (const p of plans) outcomes.set(p.name, this.settle(table, p));
    return outcomes;
  }

  /**
   * What each object wants added and removed. Keys are checked against their owners as they will be
   * once the objects planned before have converged: a key one of them gives up is free for a later
   * one, and a key one of them takes is not.
   */
  private plan(table: FabricTable, names: readonly string[]): Plan[] {
    const vx = this.vxlan?.index;
    const planned = new Map<string, string | undefined>();
    const ownerOf = (key: string): string | undefined =>
      planned.has(key) ? planned.get(key) : this.owners.get(key);
    return names.map((name) => {
      const wants = wantsOf(table, name);
      const before = this.programmed.get(name) ?? new Map<string, Wanted>();
      const next = new Map<string, Wanted>();
      let blocked = wants.blocked;
      let conflict = wants.conflict ?? false;
      let waitsFor: string | undefined;
      for (const w of wants.objects) {
        const owner = ownerOf(w.key);
        if (owner !== undefined && owner !== name) {
          blocked = `${describe(w)} is already programmed for ${owner}`;
          conflict = true;
          waitsFor = w.key;
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
      for (const w of dels) planned.set(w.key, undefined);
      for (const w of adds) planned.set(w.key, name);
      return { name, before, next, adds, dels, blocked, conflict, waitsFor, failures: [] };
    });
  }

  /** Records what an object holds now that its requests were answered; its outcome. */
  private settle(table: FabricTable, p: Plan): FabricOutcome {
    const { name, before, next, failures } = p;
    if (p.waitsFor !== undefined && table.get(name)) this.waiting.set(name, p.waitsFor);
    else this.waiting.delete(name);
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
    if (p.blocked !== undefined && table.get(name)) {
      this.errors.set(name, p.blocked);
      this.log.debug({ object: name, blocked: p.blocked }, 'fabric object not programmed');
      return p.conflict ? { code: 'invalid', message: p.blocked } : { code: 'ok', message: '' };
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
    if (!table.vtep() && this.vxlan) await this.apply(table, [{ name: 'vtep', kind: 'vtep' }]);
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
    const outcomes = await sendInBatches(
      this.sock,
      stray.map((x) => x.request),
    );
    stray.forEach((x, i) => {
      const o = outcomes[i]!;
      if (o.ok) this.log.info({ object: x.what }, 'removed a fabric object no longer wanted');
      else if (!isGone(o.error))
        this.log.warn({ object: x.what, err: o.error.message }, 'could not remove a stale fabric object');
    });
    // The stray FDB entries are gone (or were already): what the kernel holds is read again next time.
    if (vx !== undefined && stray.length > 0) this.peers.forget();
  }

  /** One PeerState per FabricPeer (see NetnsPeerView). */
  peerStates(table: FabricTable, fresh: boolean): Promise<PeerState[]> {
    return this.peers.peerStates(table, this.errors, fresh);
  }
}
