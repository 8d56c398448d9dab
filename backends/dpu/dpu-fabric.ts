import type { DpuFabricStatus } from '../../core/backend';
import { failedPrecondition } from '../../core/errors';
import type {
  FabricDataplane,
  FabricReport,
  FabricSettings,
  LocalNode,
  OwnPrefixes,
} from '../../core/fabric-dataplane';
import type { Peer, TunnelEndpoint } from '../../core/peer-source';
import { LogRate } from '../../lib/log-rate';
import type { Logger } from '../../core/logger';
import { monotonicMs } from '../../lib/monotonic-clock';
import { dpuVtepMac } from '../../lib/vtep-mac';
import type { AgentLink } from './agent-link';
import type { AgentSession } from './agent-session';
import type { AgentSync } from './agent-sync';
import type { AgentSyncState } from './agent-sync-state';
import { CarrierAdmission } from './carrier-admission';
import { DEFAULT_UPLINK_MTU } from './fabric-carriage';
import { peerNodeOf, type FabricAgent } from './fabric-plan';
import { DurableHolders, type HolderRecord } from './fabric-holders';
import { FabricPeerView } from './fabric-peer-view';
import { FabricPlanner } from './fabric-planner';

// The DPU backend's part of the fabric: the node's DPUs carry its overlay, not the host. Each agent
// that carries the fabric (fabric-carriage.ts) is one tunnel endpoint of this node with the slices the
// core gave it; apply() plans each agent's objects (fabric-plan.ts) and hands them to the agent sync,
// which sends and tracks them like ports. Ready once every healthy carrying agent acknowledged all of
// its objects at their current generations.
//
// An agent's endpoint stays in the node record for the daemon's life once seen, also while the agent
// is away: a DPU keeps its dataplane across a lost stream, and a record that dropped it would make the
// other nodes withdraw its slices from under live pods. It goes only when the agent itself says it no
// longer carries the fabric (it came back without the feature or an uplink), or moves when it comes
// back with another uplink.
//
// Which agents carry the fabric is carrier-admission.ts's: one endpoint, one holder.
//
// At 5,000 peers an agent holds ~10,000 objects, so nothing here walks them per call: each agent's plan
// is kept and changed per peer (fabric-planner.ts), and what Status says of the peers is kept until
// what it is made of moves (fabric-peer-view.ts).
//
// What an agent says of its peers is taken from each session for its duration, and only on the
// FabricPeers that agent was sent (peer-state-book.ts): a lost agent's word is forgotten, so Status
// says nothing for it rather than its last claims.
//
// Who holds each identity in an agent's plan outlives the daemon in its store (fabric-holders.ts): an
// agent's first plan after a restart keeps the incumbents its last plan had.

export interface DpuFabricDeps {
  /** This node's name, as the peer table names it. */
  node: string;
  link: AgentLink;
  sync: AgentSync;
  log: Logger;
  /** The store, which keeps the endpoints' holders; none: they last as long as the daemon. */
  holders?: () => HolderRecord;
}

const NO_OWN: OwnPrefixes = { ranges: [], byEndpoint: new Map() };

export class DpuFabric implements FabricDataplane {
  private settings: FabricSettings | undefined;
  /** The last table applied; undefined before the first apply (the table is not known complete). */
  private peers: readonly Peer[] | undefined;
  private own: OwnPrefixes = NO_OWN;
  /** Which agents carry the fabric (seen in this daemon's life), and which wait for their endpoint. */
  private readonly carriers: CarrierAdmission;
  private readonly agents: ReadonlyMap<string, FabricAgent>;
  private readonly listeners: Array<(local: LocalNode) => void> = [];
  /** Each carrying agent's plan, kept between applies. */
  private readonly planners = new Map<string, FabricPlanner>();
  /** What Status says of the peers, kept between calls. */
  private readonly view: FabricPeerView;
  /** What logClashes() last said per agent. */
  private readonly clashesLogged = new Map<string, string>();
  private readonly unsentLog = new LogRate(undefined, monotonicMs);
  /** Per agent: entries dropped for naming nothing it was sent, as of the last log line. */
  private readonly unsentLogged = new Map<string, number>();
  /** Each agent's holders, kept in the store. */
  private holders: DurableHolders | undefined;

  constructor(private readonly deps: DpuFabricDeps) {
    this.carriers = new CarrierAdmission({
      ...deps,
      named: () => this.settings?.nodeName,
      left: (id) => {
        this.planners.delete(id);
        this.holders?.forget(id);
      },
    });
    this.agents = this.carriers.agents;
    this.view = new FabricPeerView(deps.node, (node) => this.clashOf(node));
    if (deps.holders) this.keepHoldersIn(deps.holders);
  }

  /**
   * Keeps the endpoints' holders in `open()`'s store (reached at the first plan): called before the
   * first apply, so that every agent's first plan starts from what the last daemon held.
   */
  keepHoldersIn(open: () => HolderRecord): void {
    this.holders = new DurableHolders(open, this.deps.log);
  }

  /** Whether the fabric is on (prepare() ran). */
  get prepared(): boolean {
    return this.settings !== undefined;
  }

  prepare(settings: FabricSettings): Promise<LocalNode> {
    // The DPUs encapsulate every remote prefix (their PeerRoutes are ROUTE_VIA_ENCAP): hybrid, the
    // default with a cluster peer source, works as vxlan here; routed would need the host's routes.
    if (settings.mode !== 'vxlan' && settings.mode !== 'hybrid')
      return Promise.reject(
        failedPrecondition(
          `the dpu backend carries the fabric over VXLAN only (its agents' "fabric-vxlan"); fabric mode ${settings.mode} is not supported with --backend dpu, use --fabric vxlan`,
        ),
      );
    this.settings = settings;
    // Agents that connected before the fabric was prepared are its endpoints too.
    for (const s of this.deps.link.sessions()) this.carriers.learn(s, this.peers);
    return Promise.resolve(this.local());
  }

  async apply(peers: readonly Peer[], own?: OwnPrefixes): Promise<FabricReport> {
    if (!this.settings) throw failedPrecondition('the DPU fabric was applied before it was prepared');
    this.peers = peers;
    this.own = own ?? NO_OWN;
    const refusedNow = this.carriers.checkFirstTable(peers);
    const admitted = this.carriers.readmit(peers);
    this.planAll();
    if (refusedNow || admitted) this.announce();
    return Promise.resolve(this.report());
  }

  onLocalChange(listener: (local: LocalNode) => void): void {
    this.listeners.push(listener);
  }

  /**
   * This node as the fabric sees it. The host's own underlay carries no tunnel here, so the node's
   * underlay and MTU are those of its first carrying agent (by id), or none (MTU 1500, what an agent
   * that states none is assumed to have) while no agent carries the fabric. The uplink is not a
   * netdev of the host: it is named after that agent.
   */
  local(): LocalNode {
    const endpoints = this.endpoints();
    const first = [...this.agents.values()].sort(byId)[0];
    return {
      underlay: first ? [first.address] : [],
      uplink: first ? `dpu:${first.id}` : '',
      mtu: first?.uplinkMtu ?? DEFAULT_UPLINK_MTU,
      subnets: [],
      endpoints,
    };
  }

  /** This node's tunnel endpoints: every carrying agent seen, with the prefixes apply() last gave it. */
  endpoints(): TunnelEndpoint[] {
    const { vni = 0, port = 0 } = this.settings ?? {};
    return [...this.agents.values()].sort(byId).map((a) => ({
      id: a.id,
      underlay: a.address,
      mtu: a.uplinkMtu,
      vtep: { mac: dpuVtepMac(a.address, this.settings?.nodeName, a.id), vni, port },
      prefixes: [...(this.own.byEndpoint.get(a.id) ?? [])],
    }));
  }

  /**
   * An agent's session was established (called before its snapshot is built): a new or moved endpoint
   * is planned for, in its own objects and in its neighbours' peers, and the node record changes.
   */
  established(s: AgentSession): void {
    this.hearPeersOf(s);
    if (!this.settings) return;
    const learnt = this.carriers.learn(s, this.peers);
    if (!(this.carriers.readmit(this.peers) || learnt)) return;
    this.planAll();
    this.announce();
  }

  /**
   * The agent's PeerStatus is taken, for this session only, on the FabricPeers it was sent; the rest
   * is counted and said in the log, at most once per interval per agent.
   */
  private hearPeersOf(s: AgentSession): void {
    const st = this.deps.sync.state(s.agentId);
    if (!st) return;
    const book = st.peers;
    book.open({
      session: s.id,
      sent: (name) => st.fabric.index.hasPeer(name),
      unsent: (count, first) => {
        if (this.unsentLog.take(s.agentId) === undefined) return;
        const since = this.unsentLogged.get(s.agentId) ?? 0;
        this.unsentLogged.set(s.agentId, book.unsent);
        this.deps.log.warn(
          { agentId: s.agentId, dropped: book.unsent - since, total: book.unsent, latest: first, count },
          'the agent reported peers it was never sent (or no longer holds); dropped',
        );
      },
    });
    s.onClosed(() => book.close(s.id));
  }

  /** Tells the listeners this node's endpoints changed. */
  private announce(): void {
    const local = this.local();
    // After the snapshot or apply under way: a listener publishes and applies, which must not run inside it.
    queueMicrotask(() => {
      for (const l of this.listeners) l(local);
    });
  }

  report(): FabricReport {
    const objects = { routes: 0, neighbours: 0, fdb: 0 };
    if (!this.settings)
      return { ready: false, reasons: ['the fabric is not prepared'], peers: [], objects, repairs: 0 };
    const reasons: string[] = [];
    if (!this.peers) reasons.push('the fabric has not been applied yet');
    const carrying = this.deps.link
      .sessions()
      .filter((s) => s.healthy && this.deps.sync.state(s.agentId)?.carriage.carries);
    if (carrying.length === 0) reasons.push(this.noCarrier());
    for (const s of carrying) {
      const fabric = this.deps.sync.state(s.agentId)?.fabric;
      if (!fabric) continue;
      const waiting = fabric.size - fabric.acked - fabric.failed;
      if (waiting > 0)
        reasons.push(
          `DPU agent ${s.agentId} has not acknowledged ${waiting} of its ${fabric.size} fabric objects`,
        );
      if (fabric.failed > 0) {
        const [first] = fabric.failures();
        reasons.push(
          `DPU agent ${s.agentId} could not program ${fabric.failed} fabric objects (${first?.name}: ${first?.message})`,
        );
      }
    }
    // What the agents hold: a FabricPeer is the DPU's neighbour and FDB entry for a tunnel endpoint, so
    // it counts as one fdb entry; each PeerRoute as one route; summed over the agents.
    for (const st of this.carryingStates()) {
      const held = st.fabric.heldCounts();
      objects.routes += held.routes;
      objects.fdb += held.peers;
    }
    return {
      ready: reasons.length === 0,
      reasons,
      peers: this.peers ? this.view.pathsOf(this.peers, [...this.carryingStates()]) : [],
      objects,
      repairs: 0,
    };
  }

  /** Objects a connected agent that carries the fabric has not acknowledged yet (refused ones aside). */
  waiting(agentId: string): { waiting: number; size: number } | undefined {
    if (!this.settings) return undefined;
    const st = this.deps.sync.state(agentId);
    if (!st?.carriage.carries) return undefined;
    const size = st.fabric.size;
    return { waiting: size - st.fabric.acked - st.fabric.failed, size };
  }

  /** The fabric part of an agent's row in `workloadnet dpus`; undefined while the fabric is off. */
  dpuStatus(agentId: string): DpuFabricStatus | undefined {
    if (!this.settings) return undefined;
    const st = this.deps.sync.state(agentId);
    const agent = this.agents.get(agentId);
    if (!st?.carriage.carries && !agent) {
      const why = st?.carriage.carries === false ? st.carriage.why : 'not connected yet';
      return {
        carries: false,
        note: `does not carry the fabric: ${why}`,
        vtep: '',
        objectsAcked: 0,
        objectsDesired: 0,
        peersReachable: 0,
        peersTotal: 0,
      };
    }
    const peers = st ? this.view.countsOf(st) : { total: 0, reachable: 0 };
    const notes = this.deps.link.sessionOf(agentId)?.healthy
      ? []
      : [
          'away: its VTEP stays published, its DPU keeps the last programmed fabric; how it sees its peers is unknown until it is back',
        ];
    if (st && st.peers.unsent > 0)
      notes.push(`dropped ${st.peers.unsent} PeerStatus entries naming peers it was never sent`);
    return {
      carries: true,
      note: notes.join('; '),
      vtep: agent?.address ?? '',
      objectsAcked: st?.fabric.acked ?? 0,
      objectsDesired: st?.fabric.size ?? 0,
      peersReachable: peers.reachable,
      peersTotal: peers.total,
    };
  }

  stop(): Promise<void> {
    // The agents keep their fabric: pods keep reaching their peers while the daemon is away.
    return this.holders?.stop() ?? Promise.resolve();
  }

  // ---- internals -----------------------------------------------------------------------------

  /** Plans every carrying agent's objects from the last table; nothing before the first apply. */
  private planAll(): void {
    const { settings, peers } = this;
    if (!settings || !peers) return;
    const locals = [...this.agents.values()];
    let changed = 0;
    let replanned = 0;
    for (const agent of locals) {
      let planner = this.planners.get(agent.id);
      if (!planner) {
        planner = new FabricPlanner(this.holders?.restored(agent.id));
        this.planners.set(agent.id, planner);
      }
      const plan = planner.update({ node: this.deps.node, agent, locals, own: this.own, settings }, peers);
      if (planner.holdersChanged) {
        const p = planner;
        this.holders?.changed(agent.id, () => p.holders);
      }
      replanned += planner.replanned;
      changed += this.deps.sync.setFabric(agent.id, plan);
      this.logClashes(agent.id, planner.refused);
    }
    if (changed > 0)
      this.deps.log.debug({ agents: locals.length, changed, replanned }, 'fabric objects changed');
  }

  /** Says once which endpoints an agent's plan leaves out, and for whom: a newcomer's clash. */
  private logClashes(agentId: string, refused: ReadonlyMap<string, string>): void {
    const text = [...refused].map(([name, holder]) => `${name} (held by ${holder})`).join(', ');
    if (text === (this.clashesLogged.get(agentId) ?? '')) return;
    this.clashesLogged.set(agentId, text);
    if (text)
      this.deps.log.warn(
        { agentId, endpoints: text.slice(0, 2000) },
        'tunnel endpoints left out: each states a VTEP MAC or address another endpoint holds already',
      );
    else this.deps.log.info({ agentId }, 'no tunnel endpoint is left out for a clash any more');
  }

  /** The endpoint of `node` an agent's plan leaves out, with who holds its identity. */
  private clashOf(node: string): string | undefined {
    for (const planner of this.planners.values())
      for (const [name, holder] of planner.refused)
        if (peerNodeOf(name) === node) return `${name} states a VTEP MAC or address that ${holder} holds`;
    return undefined;
  }

  private *carryingStates(): Iterable<AgentSyncState> {
    for (const id of this.agents.keys()) {
      const st = this.deps.sync.state(id);
      if (st) yield st;
    }
  }

  /** Why no agent carries the fabric, naming each connected one's reason. */
  private noCarrier(): string {
    const sessions = this.deps.link.sessions();
    if (sessions.length === 0) return 'no DPU agent is connected to carry the fabric';
    const why = sessions.map((s) => {
      const st = this.deps.sync.state(s.agentId);
      if (!s.healthy) return `${s.agentId}: silent`;
      return `${s.agentId}: ${st?.carriage.carries === false ? st.carriage.why : 'carries it'}`;
    });
    return `no healthy DPU agent carries the fabric (${why.join('; ')})`;
  }
}

function byId(a: { id: string }, b: { id: string }): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}
