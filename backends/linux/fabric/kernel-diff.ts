// Makes the kernel hold exactly the plan's objects of ours: reads what is there, adds what is missing,
// replaces what differs, removes strays of ours. "Ours" is narrow and checked on every object: a route
// of our protocol in the main table, a permanent neighbour or an FDB entry on our own VXLAN device.
// Nothing else is ever read as a candidate for change, so a foreign route to the same prefix, another
// protocol's route or another device's neighbour is never touched.

import {
  AF_BRIDGE,
  AF_INET,
  AF_INET6,
  NUD_PERMANENT,
  NTF_SELF,
  RTNH_F_ONLINK,
  RTN_UNICAST,
  RTPROT_WORKLOADNET,
  RT_TABLE_MAIN,
  delNeighbourRequest,
  delRouteRequest,
  listNeighbours,
  listRoutes,
  newNeighbourRequest,
  newRouteRequest,
  type NetlinkError,
  type NetlinkRequest,
  type NetlinkSocket,
  type Neighbour,
  type Route,
} from '../../../lib/rtnetlink';
import { fdbKey, neighbourKey, routeKey, type FabricPlan, type WantedRoute } from './plan/wanted';

/** Requests per datagram: well under the socket's send buffer for any mix of ours. */
const BATCH = 200;

export interface KernelObjects {
  routes: Route[];
  neighbours: Neighbour[];
  fdb: Neighbour[];
}

/** Our objects in the kernel now. `vxlanIndex` undefined: there is no device, so no neighbours or FDB. */
export async function readOurs(sock: NetlinkSocket, vxlanIndex: number | undefined): Promise<KernelObjects> {
  const routes: Route[] = [];
  for (const family of [AF_INET, AF_INET6] as const)
    routes.push(...(await listRoutes(sock, family, { table: RT_TABLE_MAIN, protocol: RTPROT_WORKLOADNET })));
  if (vxlanIndex === undefined) return { routes, neighbours: [], fdb: [] };
  const neighbours: Neighbour[] = [];
  for (const family of [AF_INET, AF_INET6] as const)
    neighbours.push(
      ...(await listNeighbours(sock, family, { ifindex: vxlanIndex })).filter(
        (n) => (n.state & NUD_PERMANENT) !== 0,
      ),
    );
  const fdb = await listNeighbours(sock, AF_BRIDGE, { ifindex: vxlanIndex });
  return { routes, neighbours, fdb };
}

function routeMatches(have: Route, want: WantedRoute): boolean {
  // A route that goes nowhere has no next hop to compare; IPv6 reports one anyway (dev lo).
  if (want.type !== RTN_UNICAST) return have.type === want.type;
  return (
    have.type === want.type &&
    have.gateway === want.gateway &&
    have.oif === want.oif &&
    ((have.flags & RTNH_F_ONLINK) !== 0) === want.onlink &&
    have.mtu === want.mtu
  );
}

function routeRequest(r: WantedRoute, replace: boolean): NetlinkRequest {
  return newRouteRequest(
    {
      destination: r.destination,
      family: r.family,
      gateway: r.gateway,
      oif: r.oif,
      type: r.type,
      priority: r.priority,
      protocol: RTPROT_WORKLOADNET,
      table: RT_TABLE_MAIN,
      onlink: r.onlink,
      mtu: r.mtu,
    },
    { replace },
  );
}

export interface DiffOp {
  kind: 'route' | 'neighbour' | 'fdb';
  action: 'add' | 'replace' | 'delete';
  key: string;
  what: string;
  request: NetlinkRequest;
}

/** The requests that turn `have` into the plan, in a safe order: entries before routes use them, routes removed before them. */
export function diff(plan: FabricPlan, have: KernelObjects, vxlanIndex: number | undefined): DiffOp[] {
  const entries: OpsOf = { adds: [], dels: [] };
  if (vxlanIndex !== undefined) {
    diffFdb(plan, have, vxlanIndex, entries);
    diffNeighbours(plan, have, vxlanIndex, entries);
  }
  const routes = diffRoutes(plan, have);
  return [...entries.adds, ...routes.adds, ...routes.dels, ...entries.dels];
}

/** The requests of one kind of entry: what to add or replace, and what to delete. */
interface OpsOf {
  adds: DiffOp[];
  dels: DiffOp[];
}

/** Our device's FDB entries: one per peer MAC, to its underlay address; every other remote is a stray. */
function diffFdb(plan: FabricPlan, have: KernelObjects, vxlanIndex: number, out: OpsOf): void {
  const fdbHave = new Map<string, Neighbour[]>();
  for (const f of have.fdb) fdbHave.set(fdbKey(f), [...(fdbHave.get(fdbKey(f)) ?? []), f]);
  const fdbWant = new Set<string>();
  for (const f of plan.fdb) {
    const key = fdbKey(f);
    fdbWant.add(key);
    const existing = fdbHave.get(key) ?? [];
    const spec = {
      family: AF_BRIDGE,
      ifindex: vxlanIndex,
      mac: f.mac,
      dst: f.dst,
      flags: NTF_SELF,
      state: NUD_PERMANENT,
    } as const;
    if (existing.some((e) => e.dst === f.dst && (e.state & NUD_PERMANENT) !== 0)) {
      // A MAC may hold several remotes (`bridge fdb append`): all but ours are strays.
      for (const e of existing.filter((x) => x.dst !== f.dst)) out.dels.push(fdbDelete(vxlanIndex, e));
      continue;
    }
    out.adds.push({
      kind: 'fdb',
      action: existing.length > 0 ? 'replace' : 'add',
      key,
      what: `fdb ${f.mac} dst ${f.dst} (${f.peer})`,
      request: newNeighbourRequest(spec, { replace: true }),
    });
    for (const e of existing.slice(1)) out.dels.push(fdbDelete(vxlanIndex, e));
  }
  for (const [key, entries] of fdbHave)
    if (!fdbWant.has(key)) for (const e of entries) out.dels.push(fdbDelete(vxlanIndex, e));
}

/** Our device's permanent neighbours: one per gateway key, to its target's VTEP MAC. */
function diffNeighbours(plan: FabricPlan, have: KernelObjects, vxlanIndex: number, out: OpsOf): void {
  const nHave = new Map(have.neighbours.map((n) => [neighbourKey(n), n]));
  const nWant = new Set<string>();
  for (const n of plan.neighbours) {
    const key = neighbourKey(n);
    nWant.add(key);
    const e = nHave.get(key);
    if (e && e.mac === n.mac) continue;
    out.adds.push({
      kind: 'neighbour',
      action: e ? 'replace' : 'add',
      key,
      what: `neighbour ${n.dst} lladdr ${n.mac} (${n.peer})`,
      request: newNeighbourRequest(
        { family: n.family, ifindex: vxlanIndex, dst: n.dst, mac: n.mac, state: NUD_PERMANENT },
        { replace: true },
      ),
    });
  }
  for (const [key, n] of nHave)
    if (!nWant.has(key))
      out.dels.push({
        kind: 'neighbour',
        action: 'delete',
        key,
        what: `neighbour ${n.dst ?? '?'} lladdr ${n.mac ?? '?'}`,
        request: delNeighbourRequest({
          family: n.family as typeof AF_INET,
          ifindex: vxlanIndex,
          dst: n.dst,
        }),
      });
}

/** Our routes, in the main table with our protocol: the peers' prefixes and the catch-alls. */
function diffRoutes(plan: FabricPlan, have: KernelObjects): OpsOf {
  const out: OpsOf = { adds: [], dels: [] };
  const rHave = new Map(have.routes.map((r) => [routeKey(r), r]));
  const rWant = new Set<string>();
  for (const r of plan.routes) {
    const key = routeKey(r);
    rWant.add(key);
    const e = rHave.get(key);
    if (e && routeMatches(e, r)) continue;
    out.adds.push({
      kind: 'route',
      action: e ? 'replace' : 'add',
      key,
      what: `route ${r.destination}${r.gateway ? ` via ${r.gateway}` : ''} metric ${r.priority}${r.peer ? ` (${r.peer})` : ''}`,
      // Replace only a route of ours (found above, same key); a create is EXCL, so a foreign route
      // holding the same prefix and metric makes it fail (EEXIST) rather than be overwritten.
      request: routeRequest(r, e !== undefined),
    });
  }
  for (const [key, r] of rHave)
    if (!rWant.has(key))
      out.dels.push({
        kind: 'route',
        action: 'delete',
        key,
        what: `route ${r.destination} metric ${r.priority ?? 0}`,
        request: delRouteRequest({
          destination: r.destination,
          family: r.family,
          priority: r.priority,
          protocol: RTPROT_WORKLOADNET,
          table: RT_TABLE_MAIN,
        }),
      });
  return out;
}

function fdbDelete(ifindex: number, e: Neighbour): DiffOp {
  return {
    kind: 'fdb',
    action: 'delete',
    key: fdbKey(e),
    what: `fdb ${e.mac ?? '?'} dst ${e.dst ?? '?'}`,
    request: delNeighbourRequest({ family: AF_BRIDGE, ifindex, mac: e.mac, dst: e.dst, flags: NTF_SELF }),
  };
}

export interface OpFailure {
  op: DiffOp;
  error: NetlinkError;
}

/** Sends the ops in order, in batches; a delete of something already gone is not a failure. */
export async function applyOps(sock: NetlinkSocket, ops: readonly DiffOp[]): Promise<OpFailure[]> {
  const failures: OpFailure[] = [];
  for (let i = 0; i < ops.length; i += BATCH) {
    const chunk = ops.slice(i, i + BATCH);
    const outcomes = await sock.batch(chunk.map((o) => o.request));
    outcomes.forEach((o, j) => {
      const op = chunk[j];
      if (o.ok || op === undefined) return;
      if (op.action === 'delete' && o.error.notFound) return;
      failures.push({ op, error: o.error });
    });
  }
  return failures;
}
