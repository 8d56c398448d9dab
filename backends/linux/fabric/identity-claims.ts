// One holder per identity a tunnel target programs: its prefixes (the routes), its VTEP MAC (the FDB
// key), its underlay address (where the FDB entry or a direct route sends traffic) and its gateway keys
// (the neighbours its routes use). Two targets on one of them means traffic meant for one goes to the
// other, so a record that states a live node's MAC or address would take that node's traffic.
//
// The incumbent keeps what it has: the target that held an identity in the last plan, and still states
// it, keeps it whatever the newcomer's name; the newcomer is refused, with the holder named. The plan
// after the holder stops stating it (it left, or took another) gives it to the newcomer: the planner is
// a pure function, so the holders of the last plan come in with the context (linux-fabric.ts keeps
// them). After a start there is no last plan, but the kernel still holds what the last daemon
// programmed: its FDB entries, neighbours and routes name the incumbents (holdersInKernel), so that a
// squatter sorting first by name does not take a live node's MAC at every restart. Among targets none
// of which held it, the first by name wins.

import type { ClaimKind, RefusedClaim } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { cidrContains, parseCidr, type Cidr } from '../../../lib/cidr';
import { canonicalAddress, type Neighbour, type Route } from '../../../lib/rtnetlink';

/** Our entries as the kernel holds them (lib/overlay/kernel-diff.ts reads them). */
interface KernelEntries {
  routes: readonly Route[];
  neighbours: readonly Neighbour[];
  fdb: readonly Neighbour[];
}

/** Who held each identity in a plan: `<kind>|<value>` → the target's label (`node` or `node/endpoint`). */
export type Holders = ReadonlyMap<string, string>;

const key = (kind: ClaimKind, value: string): string => `${kind}|${value}`;

export class Claims {
  /** What this plan programs, by holder: the next plan's incumbents. */
  readonly held = new Map<string, string>();
  /** What targets of this plan took so far (a gateway key is taken when picked, before it is programmed). */
  private readonly taken = new Map<string, string>();
  private byNode?: Map<string, Peer>;

  constructor(
    private readonly previous: Holders | undefined,
    private readonly peers: readonly Peer[],
  ) {}

  /** Who keeps `value` from `label`, if anyone: a target of this plan, or the incumbent still stating it. */
  holder(kind: ClaimKind, value: string, label: string): string | undefined {
    const k = key(kind, value);
    const now = this.taken.get(k);
    if (now !== undefined) return now === label ? undefined : now;
    const before = this.previous?.get(k);
    if (before !== undefined && before !== label && this.states(before, kind, value)) return before;
    return undefined;
  }

  /** `label` takes `value`; `programmed` records it as held (what the next plan's incumbents are). */
  take(kind: ClaimKind, value: string, label: string, programmed = true): void {
    const k = key(kind, value);
    this.taken.set(k, label);
    if (programmed) this.held.set(k, label);
  }

  /** Records a value taken earlier (a gateway key) as programmed. */
  programmed(kind: ClaimKind, value: string, label: string): void {
    this.held.set(key(kind, value), label);
  }

  /**
   * Whether the target `label` still states `value` in this plan's peers: the same MAC, underlay address
   * or prefix, or a gateway key inside its prefixes. Looked up only when an incumbent meets a newcomer.
   */
  private states(label: string, kind: ClaimKind, value: string): boolean {
    this.byNode ??= new Map(this.peers.map((p) => [p.node, p]));
    const slash = label.indexOf('/');
    const peer = this.byNode.get(slash < 0 ? label : label.slice(0, slash));
    if (!peer || peer.prefixes.length === 0) return false;
    const endpoint = slash < 0 ? undefined : peer.endpoints?.find((e) => e.id === label.slice(slash + 1));
    if (slash >= 0 && (!endpoint || endpoint.prefixes.length === 0)) return false;
    const prefixes = endpoint ? endpoint.prefixes : peer.prefixes;
    switch (kind) {
      case 'mac':
        return (endpoint ? endpoint.vtep : peer.vtep)?.mac.toLowerCase() === value;
      case 'underlay':
        return (endpoint ? [endpoint.underlay] : peer.underlay).some((u) => canonical(u) === value);
      case 'prefix':
        return prefixes.some((p) => cidr(p)?.text === value);
      case 'gateway': {
        const a = cidr(value.includes(':') ? `${value}/128` : `${value}/32`);
        return a !== undefined && prefixes.some((p) => contains(cidr(p), a));
      }
    }
  }
}

/**
 * Who held each identity, as the kernel's entries of our device and protocol show it: an FDB entry
 * (MAC → underlay) is the target that states both; a permanent neighbour (gateway key → MAC) is that
 * MAC's target; a route is the node of the target its next hop leads to. Entries no listed target
 * explains are nobody's: the plan decides them as it would without a history.
 */
export function holdersInKernel(have: KernelEntries, peers: readonly Peer[]): Holders {
  const targets = peers.flatMap((p) => [
    { label: p.node, node: p.node, mac: p.vtep?.mac.toLowerCase(), underlay: addresses(p.underlay) },
    ...(p.endpoints ?? []).map((e) => ({
      label: `${p.node}/${e.id}`,
      node: p.node,
      mac: e.vtep?.mac.toLowerCase(),
      underlay: addresses([e.underlay]),
    })),
  ]);
  const held = new Map<string, string>();
  const byMac = new Map<string, { label: string; node: string }>();
  for (const f of have.fdb) {
    const mac = f.mac?.toLowerCase();
    const dst = f.dst === undefined ? undefined : canonical(f.dst);
    if (mac === undefined || dst === undefined) continue;
    const t = targets.find((x) => x.mac === mac && x.underlay.includes(dst));
    if (!t) continue;
    held.set(key('mac', mac), t.label);
    held.set(key('underlay', dst), t.label);
    byMac.set(mac, t);
  }
  const byGateway = new Map<string, { label: string; node: string }>();
  for (const n of have.neighbours) {
    const t = n.mac === undefined ? undefined : byMac.get(n.mac.toLowerCase());
    const dst = n.dst === undefined ? undefined : canonical(n.dst);
    if (!t || dst === undefined) continue;
    held.set(key('gateway', dst), t.label);
    byGateway.set(dst, t);
  }
  for (const r of have.routes) {
    const gw = r.gateway === undefined ? undefined : canonical(r.gateway);
    const prefix = cidr(r.destination)?.text;
    if (gw === undefined || prefix === undefined) continue;
    // Through the tunnel: the gateway key's target; direct: the target whose underlay is the next hop.
    const t = byGateway.get(gw) ?? targets.find((x) => x.underlay.includes(gw));
    if (!t) continue;
    held.set(key('prefix', prefix), t.node);
    if (!byGateway.has(gw)) held.set(key('underlay', gw), t.label);
  }
  return held;
}

/** The words for a refused claim, as Status and `workloadnet peers` show it. */
export function refusalReason(r: RefusedClaim): string {
  const what = { mac: 'VTEP MAC', underlay: 'underlay address', gateway: 'gateway key', prefix: 'prefix' }[
    r.claim
  ];
  if (r.holder === 'this node') return `${what} ${r.value} is this node's own`;
  return `${what} ${r.value} is held by ${r.holder}; refused until ${r.holder} no longer states it (the incumbent keeps it)`;
}

/** The canonical forms of those of `list` that are addresses. */
function addresses(list: readonly string[]): string[] {
  return list.flatMap((a) => {
    const c = canonical(a);
    return c === undefined ? [] : [c];
  });
}

function canonical(a: string): string | undefined {
  try {
    return canonicalAddress(a);
  } catch {
    return undefined;
  }
}

function cidr(text: string): Cidr | undefined {
  try {
    return parseCidr(text);
  } catch {
    return undefined;
  }
}

function contains(outer: Cidr | undefined, inner: Cidr): boolean {
  return outer !== undefined && outer.family === inner.family && cidrContains(outer, inner.network);
}
