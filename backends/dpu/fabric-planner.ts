import type { Peer } from '../../core/peer-source';
import { peerShape } from '../../core/fabric/peer-shape';
import {
  identityKeys,
  identityOwners,
  localPartKey,
  planFabric,
  planLocalPart,
  planOwn,
  planRemotePart,
  remotePartKey,
  routeBody,
  routeObject,
  type FabricBody,
  type FabricPlanInput,
  type PlanPart,
} from './fabric-plan';

// One agent's fabric plan kept between applies, so that a change of one peer re-plans that peer's
// objects only: at 5,000 peers a full plan is ~10,000 objects per agent, and every apply would build
// and compare them all. The result is always what planFabric gives for the same input (the property
// test checks it on random changes): the plan is made of the same parts (fabric-plan.ts), each peer's
// part is replaced when the peer's record changed, and a route whose prefix a replaced part claimed is
// given again to the first part (in planFabric's order) that still claims it.
//
// Anything else changing (the agent, this node's other agents, its prefixes, the settings) plans again
// from scratch: those change when a DPU comes or goes, not per peer.
//
// Objects of unchanged parts keep their identity in the returned map, which FabricDesired.set takes as
// "unchanged" without comparing them.
//
// Two endpoints stating one VTEP MAC or address are decided by incumbency (fabric-plan.ts): such a
// table is planned whole, given who held each identity in the plan before this update. A planner made
// after a daemon restart starts from the holders the last daemon kept (fabric-holders.ts), so its first
// plan keeps them as the previous plan would have; `holdersChanged` tells when they are worth keeping
// again.

/** Everything of the plan's input but the peers. */
export type PlanContext = Omit<FabricPlanInput, 'peers'>;

interface Part {
  shape: string;
  part: PlanPart;
  /** A remote part's node, and the record it was planned from (the same record: nothing to compare). */
  node?: string;
  peer?: Peer;
}

export class FabricPlanner {
  private context: string | undefined;
  private input: PlanContext | undefined;
  private plan = new Map<string, FabricBody>();
  private ownPrefixes = new Set<string>();
  /** Parts by key (localPartKey / remotePartKey). */
  private parts = new Map<string, Part>();
  /** Which part each FabricPeer name came from: two parts naming one object need the full plan's order. */
  private owners = new Map<string, string>();
  /** Per prefix, the keys of the parts that ask for a route to it, sorted (the first one wins). */
  private claims = new Map<string, string[]>();
  /**
   * Each remote node's part key, made once (one text per node per apply is garbage at 5,000), and the
   * last update that listed the node: what tells a node gone, or listed twice, without a map of the
   * table made per apply.
   */
  private keys = new Map<string, { key: string; listed: number }>();
  private updates = 0;
  /** Which object holds each identity (VTEP MAC, address) in the plan, kept with it. */
  private identities = new Map<string, string>();
  /** What this update changed in `identities` (key, previous holder): undone, it is the last plan's. */
  private journal: Array<[string, string | undefined]> = [];
  /** Parts planned by the last update (for tests and the log: what an apply cost). */
  replanned = 0;
  /** Endpoints the last plan left out, each with the object that holds its identity. */
  refused = new Map<string, string>();
  /** Whether the last update changed which object holds an identity (or made the first plan). */
  holdersChanged = false;

  /** `held`: who held each identity before this planner existed (a restart); none, a first plan. */
  constructor(held?: ReadonlyMap<string, string>) {
    // The first update plans from scratch, taking what `identities` held before it as the last plan's.
    if (held) this.identities = new Map(held);
  }

  /** Which object holds each identity in the plan last returned (the planner's own map: read, not kept). */
  get holders(): ReadonlyMap<string, string> {
    return this.identities;
  }

  /** The plan for `peers` under `context`: the whole map, updated in place. */
  update(context: PlanContext, peers: readonly Peer[]): ReadonlyMap<string, FabricBody> {
    const text = contextShape(context);
    this.journal = [];
    this.holdersChanged = false;
    if (text !== this.context) return this.rebuild(context, text, peers, hasTwice(peers, context.node));
    const stamp = ++this.updates;
    for (const p of peers) {
      if (p.node === context.node) continue;
      let k = this.keys.get(p.node);
      if (!k) {
        k = { key: remotePartKey(p.node), listed: 0 };
        this.keys.set(p.node, k);
      }
      // A table naming one node twice is planned whole, as planFabric orders it.
      if (k.listed === stamp) return this.rebuild(context, text, peers, true);
      k.listed = stamp;
    }
    this.replanned = 0;
    const input = this.input as PlanContext;
    // forEach, not for-of: an entry array per part per apply is garbage at 5,000.
    this.parts.forEach(({ part, node }, key) => {
      if (node === undefined || this.keys.get(node)?.listed === stamp) return;
      this.dropPart(key, part);
      this.parts.delete(key);
      this.keys.delete(node);
      this.replanned++;
    });
    for (const peer of peers) {
      if (peer.node === context.node) continue;
      const node = peer.node;
      const key = (this.keys.get(node) as { key: string }).key;
      const old = this.parts.get(key);
      if (old?.peer === peer) continue;
      const shape = peerShape(peer);
      if (old?.shape === shape) {
        old.peer = peer;
        continue;
      }
      if (old) this.dropPart(key, old.part);
      const part = planRemotePart(input.agent, peer);
      this.parts.set(key, { shape, part, node, peer });
      if (!this.addPart(key, part)) return this.rebuild(context, text, peers, true);
      this.replanned++;
    }
    this.holdersChanged = this.journalMoved();
    return this.plan;
  }

  private rebuild(
    context: PlanContext,
    text: string,
    peers: readonly Peer[],
    whole: boolean,
  ): ReadonlyMap<string, FabricBody> {
    const held = this.heldBefore();
    this.identities = new Map();
    this.journal = [];
    this.refused = new Map();
    this.plan = new Map();
    this.parts = new Map();
    this.owners = new Map();
    this.claims = new Map();
    this.keys = new Map();
    this.input = context;
    this.context = text;
    const own = planOwn(context);
    this.ownPrefixes = new Set(own.prefixes);
    for (const o of own.objects) {
      this.plan.set(o.name, o);
      for (const k of identityKeys(o)) this.identities.set(k, o.name);
    }
    let clash = whole;
    for (const other of whole ? [] : context.locals) {
      if (other.id === context.agent.id) continue;
      const key = localPartKey(other.id);
      const part = planLocalPart(context, other);
      this.parts.set(key, { shape: '', part });
      clash = !this.addPart(key, part) || clash;
    }
    for (const peer of whole ? [] : peers) {
      if (peer.node === context.node) continue;
      const key = remotePartKey(peer.node);
      const part = planRemotePart(context.agent, peer);
      this.parts.set(key, { shape: peerShape(peer), part, node: peer.node, peer });
      clash = !this.addPart(key, part) || clash;
    }
    this.replanned = this.parts.size;
    // Parts that name one object (or one node twice) override each other in planFabric's order, which
    // the per-part bookkeeping does not model: such a table is planned whole, and next time again.
    if (clash) {
      this.context = undefined;
      this.plan = planFabric({ ...context, peers, held }, this.refused);
      this.identities = identityOwners(this.plan);
    }
    this.holdersChanged = !sameHolders(held, this.identities);
    return this.plan;
  }

  /**
   * Adds a part's objects and claims; false when one of its objects is another part's, or states an
   * identity another object holds.
   */
  private addPart(key: string, part: PlanPart): boolean {
    const mine = new Map<string, string>();
    for (const o of part.objects) {
      const owner = this.owners.get(o.name);
      if (owner !== undefined && owner !== key) return false;
      for (const k of identityKeys(o)) {
        const holder = this.identities.get(k) ?? mine.get(k);
        if (holder !== undefined && holder !== o.name) return false;
        mine.set(k, o.name);
      }
    }
    for (const o of part.objects) {
      this.owners.set(o.name, key);
      this.plan.set(o.name, o);
      for (const k of identityKeys(o)) this.setIdentity(k, o.name);
    }
    for (const r of part.routes) {
      const list = this.claims.get(r.prefix);
      if (list) list.splice(sortedIndex(list, key), 0, key);
      else this.claims.set(r.prefix, [key]);
      this.route(r.prefix);
    }
    return true;
  }

  private dropPart(key: string, part: PlanPart): void {
    for (const o of part.objects) {
      if (this.owners.get(o.name) !== key) continue;
      this.owners.delete(o.name);
      this.plan.delete(o.name);
      for (const k of identityKeys(o)) if (this.identities.get(k) === o.name) this.setIdentity(k, undefined);
    }
    for (const r of part.routes) {
      const list = this.claims.get(r.prefix);
      const i = list?.indexOf(key) ?? -1;
      if (list && i >= 0) list.splice(i, 1);
      if (list?.length === 0) this.claims.delete(r.prefix);
      this.route(r.prefix);
    }
  }

  private setIdentity(key: string, holder: string | undefined): void {
    this.journal.push([key, this.identities.get(key)]);
    if (holder === undefined) this.identities.delete(key);
    else this.identities.set(key, holder);
  }

  /** Whether this update's changes to `identities` left one with another holder than before it. */
  private journalMoved(): boolean {
    const seen = new Set<string>();
    for (const [key, before] of this.journal) {
      // The first entry of a key has its holder before the update.
      if (seen.has(key)) continue;
      seen.add(key);
      if (this.identities.get(key) !== before) return true;
    }
    return false;
  }

  /** Who held each identity in the plan last returned (this update's changes undone). */
  private heldBefore(): Map<string, string> {
    const held = new Map(this.identities);
    for (let i = this.journal.length - 1; i >= 0; i--) {
      const [key, holder] = this.journal[i] as [string, string | undefined];
      if (holder === undefined) held.delete(key);
      else held.set(key, holder);
    }
    return held;
  }

  /** Gives the route to `prefix` to the first part that claims it (none: no route). */
  private route(prefix: string): void {
    const name = routeObject(prefix);
    const first = this.ownPrefixes.has(prefix) ? undefined : this.claims.get(prefix)?.[0];
    if (first === undefined) {
      this.plan.delete(name);
      return;
    }
    const route = this.parts.get(first)?.part.routes.find((r) => r.prefix === prefix);
    if (route === undefined) {
      // Not reached: a claim is kept only with its part.
      this.plan.delete(name);
      return;
    }
    const body = routeBody((this.input as PlanContext).agent, route);
    const had = this.plan.get(name)?.peerRoute;
    // Unchanged, the object keeps its identity (FabricDesired.set then sends nothing).
    if (had?.peer === route.peer && had.mtu === body.peerRoute?.mtu) return;
    this.plan.set(name, body);
  }
}

/** Whether the table names one node (other than this one) twice. */
function hasTwice(peers: readonly Peer[], self: string): boolean {
  const nodes = new Set<string>();
  for (const p of peers) {
    if (p.node === self) continue;
    if (nodes.has(p.node)) return true;
    nodes.add(p.node);
  }
  return false;
}

function sameHolders(a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean {
  if (a.size !== b.size) return false;
  for (const [key, holder] of a) if (b.get(key) !== holder) return false;
  return true;
}

function contextShape(c: PlanContext): string {
  const own = [...c.own.byEndpoint.entries()].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
  const locals = [...c.locals].sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
  return JSON.stringify([c.node, c.agent, locals, own, c.settings.vni, c.settings.port, c.settings.nodeName]);
}

function sortedIndex(list: string[], key: string): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((list[mid] as string) < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
