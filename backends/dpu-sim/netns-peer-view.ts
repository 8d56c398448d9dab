import {
  AF_BRIDGE,
  AF_INET,
  AF_INET6,
  RTM_NEWROUTE,
  RTN_UNICAST,
  canonicalAddress,
  decodeRoute,
  listNeighbours,
  lookupRouteRequest,
  type NetlinkSocket,
  type Route,
} from '../../lib/rtnetlink';
import type { PeerState } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricTable } from './fabric-table';
import { sendInBatches } from './netlink-batches';

// What the netns fabric reports about its peers (PeerStatus), from what the kernel of the DPU
// namespace shows: wn-vxlan's FDB, the neighbours, the underlay routes to the peers. Reading all of
// that after every change would cost more than the change, so the FDB and the neighbours are read afresh
// on the heartbeat (or when never read), and in between the last read stands, kept up to date with
// every FDB entry the kernel has since confirmed added or removed (NetnsFabric tells this view).
// What changes behind our back (an entry deleted by hand, a next hop that stops answering) shows by
// the next heartbeat.

/** How long a looked-up underlay route stands for the kernel's (see lookUpUnderlay()). */
const UNDERLAY_ROUTE_TTL_MS = 5000;

const NUD_INCOMPLETE = 0x01;
const NUD_FAILED = 0x20;

/** How an FDB entry shows in a dump of wn-vxlan's forwarding database. */
const fdbEntry = (mac: string, dst: string): string => `${mac.toLowerCase()}|${canonicalAddress(dst)}`;

/** fdbEntry() by a peer's MAC and address as sent: parsing 5,000 addresses per PeerStatus adds up. */
const entries = new Map<string, string>();
function peerFdbEntry(mac: string, dst: string): string {
  const key = `${mac}|${dst}`;
  let entry = entries.get(key);
  if (entry === undefined) {
    if (entries.size > 100_000) entries.clear();
    entry = fdbEntry(mac, dst);
    entries.set(key, entry);
  }
  return entry;
}

export class NetnsPeerView {
  /** Routes to peers' underlay addresses, and when each was looked up (performance.now()). */
  private readonly underlayRoutes = new Map<string, { at: number; route: Route | undefined }>();
  /** The FDB entries on wn-vxlan (fdbEntry()) as last read, with those confirmed since; undefined: read. */
  private fdb: Set<string> | undefined;
  /** Entries confirmed while a read of the FDB is under way: the read may have missed them. */
  private fdbDuringRead: Array<[string, boolean]> | undefined;
  /** Every neighbour's state in the DPU namespace (`ifindex|address`) as last read. */
  private neighbourStates: Map<string, number> | undefined;

  /** `device`: wn-vxlan's ifindex now (undefined: there is none). */
  constructor(
    private readonly sock: NetlinkSocket,
    private readonly device: () => number | undefined,
  ) {}

  /** The kernel confirmed an FDB entry (MAC → underlay address) added, or removed, on wn-vxlan. */
  fdbConfirmed(mac: string, dst: string, present: boolean): void {
    const entry = fdbEntry(mac, dst);
    if (present) this.fdb?.add(entry);
    else this.fdb?.delete(entry);
    this.fdbDuringRead?.push([entry, present]);
  }

  /** wn-vxlan was created anew: it holds no entries. */
  deviceReplaced(): void {
    this.fdb = new Set();
  }

  /** Entries went without being confirmed one by one: read the FDB again next time. */
  forget(): void {
    this.fdb = undefined;
  }

  /**
   * Looks up the kernel's routes to peers' underlay addresses: an address new to the table at once,
   * and, on a fresh read, each again once it is UNDERLAY_ROUTE_TTL_MS old: one lookup per peer for
   * every PeerStatus would be most of what a change costs this process (each answer is a datagram of
   * its own, batched or not).
   */
  private async lookUpUnderlay(addresses: Iterable<string>, fresh: boolean): Promise<void> {
    const now = performance.now();
    const due = [...new Set(addresses)].filter((a) => {
      const seen = this.underlayRoutes.get(a);
      return !seen || (fresh && now - seen.at >= UNDERLAY_ROUTE_TTL_MS);
    });
    const outcomes = await sendInBatches(
      this.sock,
      due.map((a) => lookupRouteRequest(a)),
    );
    due.forEach((address, i) => {
      const o = outcomes[i]!;
      const msg = o.ok ? o.replies.find((m) => m.type === RTM_NEWROUTE) : undefined;
      this.underlayRoutes.set(address, { at: now, route: msg ? decodeRoute(msg) : undefined });
    });
  }

  /** Reads wn-vxlan's FDB and every neighbour of the namespace from the kernel. */
  private async readKernel(): Promise<void> {
    const vx = this.device();
    this.fdbDuringRead = [];
    try {
      const fdb = vx === undefined ? [] : await listNeighbours(this.sock, AF_BRIDGE, { ifindex: vx });
      const neighbours = new Map<string, number>();
      for (const family of [AF_INET, AF_INET6] as const)
        for (const n of await listNeighbours(this.sock, family))
          if (n.dst !== undefined) neighbours.set(`${n.ifindex}|${n.dst}`, n.state);
      this.neighbourStates = neighbours;
      // A read of a device replaced meanwhile says nothing of the new one.
      if (this.device() !== vx) return;
      const view = new Set(fdb.map((f) => `${f.mac ?? ''}|${f.dst ?? ''}`));
      for (const [entry, present] of this.fdbDuringRead)
        if (present) view.add(entry);
        else view.delete(entry);
      this.fdb = view;
    } finally {
      this.fdbDuringRead = undefined;
    }
  }

  /**
   * What the DPU can honestly say about each peer. reachable: its FDB entry is in the kernel on our
   * device, the underlay has a route to its address, and the next hop of that route is not known to
   * be dead (no FAILED or INCOMPLETE neighbour entry). That is "the path is programmed and nothing
   * says it is broken", not a probe of the peer: a kernel VXLAN device keeps no per-remote state to
   * prove more (with learning off, receiving does not touch the FDB). offloaded: false, always: this is
   * the kernel's software path, not an eswitch. Packets: 0, because the kernel counts per device
   * (ip -s link show wn-vxlan), not per remote; a real DPU counts per flow. `errors`: why an object
   * is not (fully) programmed. `fresh`: read the FDB and the neighbours from the kernel again.
   */
  async peerStates(
    table: FabricTable,
    errors: ReadonlyMap<string, string>,
    fresh: boolean,
  ): Promise<PeerState[]> {
    if (fresh || this.fdb === undefined || this.neighbourStates === undefined) await this.readKernel();
    const held = this.device() === undefined ? new Set<string>() : (this.fdb ?? new Set<string>());
    const neighbours = this.neighbourStates ?? new Map<string, number>();
    const peers = table.peers();
    // Addresses of peers that left are not looked up again.
    if (this.underlayRoutes.size > 2 * peers.length) {
      const wanted = new Set(peers.map((o) => o.peer!.address));
      for (const a of this.underlayRoutes.keys()) if (!wanted.has(a)) this.underlayRoutes.delete(a);
    }
    const why = new Map<string, string | undefined>();
    for (const o of peers) {
      const p = o.peer!;
      let reason = errors.get(o.name);
      if (reason === undefined && !held.has(peerFdbEntry(p.mac, p.address)))
        reason = `its FDB entry (${p.mac} dst ${p.address}) is not on wn-vxlan`;
      why.set(o.name, reason);
    }
    await this.lookUpUnderlay(
      peers.filter((o) => why.get(o.name) === undefined).map((o) => o.peer!.address),
      fresh,
    );
    return peers.map((o) => {
      const p = o.peer!;
      let reason = why.get(o.name);
      if (reason === undefined) {
        const route = this.underlayRoutes.get(p.address)?.route;
        if (!route || route.type !== RTN_UNICAST) reason = `no underlay route to ${p.address}`;
        else {
          const hop = route.gateway ?? canonicalAddress(p.address);
          const state = neighbours.get(`${route.oif ?? 0}|${hop}`);
          if (state !== undefined && (state & (NUD_FAILED | NUD_INCOMPLETE)) !== 0)
            reason = `the underlay next hop ${hop} does not answer`;
        }
      }
      return {
        name: o.name,
        reachable: reason === undefined,
        offloaded: false,
        txPackets: 0,
        rxPackets: 0,
        lastError: errors.get(o.name) ?? reason ?? '',
      };
    });
  }
}
