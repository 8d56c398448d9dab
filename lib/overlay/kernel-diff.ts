// Makes the kernel hold exactly the plan's objects of ours: reads what is there, adds what is missing,
// replaces what differs, removes strays of ours. "Ours" is narrow and checked on every object: a route
// of our protocol in the main table, a permanent neighbour or an FDB entry on our own VXLAN device.
// Nothing else is ever read as a candidate for change, so a foreign route to the same prefix, another
// protocol's route or another device's neighbour is never touched.
// Its own file because the read of what is ours serves every writer of the overlay (the simulator
// reads its strays here too), and the diff of a whole plan is the Linux fabric's way of converging.

import {
  AF_BRIDGE,
  AF_INET,
  AF_INET6,
  NUD_PERMANENT,
  RTNH_F_ONLINK,
  RTN_UNICAST,
  RTPROT_WORKLOADNET,
  RT_TABLE_MAIN,
  listNeighbours,
  listRoutes,
  type NetlinkError,
  type NetlinkRequest,
  type NetlinkSocket,
  type Neighbour,
  type Route,
} from '../rtnetlink';
import {
  describeFdb,
  describeNeighbour,
  describeRoute,
  fdbKey,
  neighbourKey,
  routeKey,
  type OverlayEntries,
  type OverlayRoute,
} from './entries';
import {
  addRouteRequest,
  deleteFdbRequest,
  deleteNeighbourRequest,
  deleteRouteRequest,
  setFdbRequest,
  setNeighbourRequest,
} from './requests';

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

function routeMatches(have: Route, want: OverlayRoute): boolean {
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

export interface DiffOp {
  kind: 'route' | 'neighbour' | 'fdb';
  action: 'add' | 'replace' | 'delete';
  key: string;
  what: string;
  request: NetlinkRequest;
}

/** The requests that turn `have` into the plan, in a safe order: entries before routes use them, routes removed before them. */
export function diff(plan: OverlayEntries, have: KernelObjects, vxlanIndex: number | undefined): DiffOp[] {
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
function diffFdb(plan: OverlayEntries, have: KernelObjects, vxlanIndex: number, out: OpsOf): void {
  const fdbHave = new Map<string, Neighbour[]>();
  for (const f of have.fdb) fdbHave.set(fdbKey(f), [...(fdbHave.get(fdbKey(f)) ?? []), f]);
  const fdbWant = new Set<string>();
  for (const f of plan.fdb) {
    const key = fdbKey(f);
    fdbWant.add(key);
    const existing = fdbHave.get(key) ?? [];
    if (existing.some((e) => e.dst === f.dst && (e.state & NUD_PERMANENT) !== 0)) {
      // A MAC may hold several remotes (`bridge fdb append`): all but ours are strays.
      for (const e of existing.filter((x) => x.dst !== f.dst)) out.dels.push(fdbDelete(vxlanIndex, e));
      continue;
    }
    out.adds.push({
      kind: 'fdb',
      action: existing.length > 0 ? 'replace' : 'add',
      key,
      what: describeFdb(f),
      request: setFdbRequest(vxlanIndex, f),
    });
    for (const e of existing.slice(1)) out.dels.push(fdbDelete(vxlanIndex, e));
  }
  for (const [key, entries] of fdbHave)
    if (!fdbWant.has(key)) for (const e of entries) out.dels.push(fdbDelete(vxlanIndex, e));
}

/** Our device's permanent neighbours: one per gateway key, to its target's VTEP MAC. */
function diffNeighbours(plan: OverlayEntries, have: KernelObjects, vxlanIndex: number, out: OpsOf): void {
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
      what: describeNeighbour(n),
      request: setNeighbourRequest(vxlanIndex, n),
    });
  }
  for (const [key, n] of nHave)
    if (!nWant.has(key))
      out.dels.push({
        kind: 'neighbour',
        action: 'delete',
        key,
        what: `neighbour ${n.dst ?? '?'} lladdr ${n.mac ?? '?'}`,
        request: deleteNeighbourRequest(vxlanIndex, { family: n.family as typeof AF_INET, dst: n.dst }),
      });
}

/** Our routes, in the main table with our protocol: the peers' prefixes and the catch-alls. */
function diffRoutes(plan: OverlayEntries, have: KernelObjects): OpsOf {
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
      what: describeRoute(r),
      // Replace only a route of ours (found above, same key); a create is EXCL, so a foreign route
      // holding the same prefix and metric makes it fail (EEXIST) rather than be overwritten.
      request: addRouteRequest(r, { replace: e !== undefined }),
    });
  }
  for (const [key, r] of rHave)
    if (!rWant.has(key))
      out.dels.push({
        kind: 'route',
        action: 'delete',
        key,
        what: `route ${r.destination} metric ${r.priority ?? 0}`,
        request: deleteRouteRequest(r),
      });
  return out;
}

function fdbDelete(ifindex: number, e: Neighbour): DiffOp {
  return {
    kind: 'fdb',
    action: 'delete',
    key: fdbKey(e),
    what: `fdb ${e.mac ?? '?'} dst ${e.dst ?? '?'}`,
    request: deleteFdbRequest(ifindex, e),
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
