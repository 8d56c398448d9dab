import type { PeerPath, PeerSeenBy } from '../../core/fabric-dataplane';
import type { Peer } from '../../core/peer-source';
import type { PeerState } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentFabricIndex } from './agent-fabric-index';
import type { AgentSyncState } from './agent-sync-state';

// What Status says of the fabric's peers: one path per peer node (through the DPUs, or why not) with
// each carrying agent's word on it, and per agent how many of its FabricPeers it reaches. At 5,000
// peers an agent holds ~10,000 objects, so nothing here walks them per call: each value is kept until
// what it is made of moves (the peer table, an agent's objects or its PeerStatus; acks only move
// counts), and a peer node's path is made again only when the agents' word on it moved. Its own file:
// the fabric plans and sends, this only reads what the agents hold and say, and keeps what it read.

export class FabricPeerView {
  /** The last peer paths, and what they were made of. */
  private paths: { inputs: unknown[]; value: PeerPath[] } | undefined;
  /** Each peer node's path as last made, and what it was made of (the report makes only moved ones). */
  private readonly pathOf = new Map<string, KeptPath>();
  private pathBuilds = 0;
  private readonly seen = new WeakMap<
    AgentSyncState,
    { revision: number; byNode: Map<string, PeerSeenBy> }
  >();
  private sorted: { peers: readonly Peer[]; value: readonly Peer[] } | undefined;
  private readonly peerCounts = new Map<string, { inputs: unknown[]; total: number; reachable: number }>();

  constructor(
    /** This node's name, as the peer table names it. */
    private readonly node: string,
    /** The endpoint of `node` an agent's plan leaves out, with who holds its identity. */
    private readonly clashOf: (node: string) => string | undefined,
  ) {}

  /** An agent's FabricPeers, and how many of them its last PeerStatus says are reachable. */
  countsOf(st: AgentSyncState): { total: number; reachable: number } {
    const index = st.fabric.index;
    const inputs = [index, st.fabric.revision, st.peers, st.peers.revision];
    const kept = this.peerCounts.get(st.agentId);
    if (kept && sameInputs(kept.inputs, inputs)) return kept;
    let reachable = 0;
    for (const p of st.peers.values()) if (p.reachable && index.hasPeer(p.name)) reachable++;
    const counts = { inputs, total: index.peerCount, reachable };
    this.peerCounts.set(st.agentId, counts);
    return counts;
  }

  /**
   * One path per peer node: through the DPUs when some agent holds a tunnel endpoint of it. Made again
   * only when the table, an agent's objects or its PeerStatus changed since the last.
   */
  pathsOf(peers: readonly Peer[], carrying: readonly AgentSyncState[]): PeerPath[] {
    const inputs: unknown[] = [peers];
    for (const st of carrying) inputs.push(st, st.fabric.revision, st.fabric.size, st.peers.revision);
    if (this.paths && sameInputs(this.paths.inputs, inputs)) return this.paths.value;
    const value = this.buildPaths(peers, carrying);
    this.paths = { inputs, value };
    return value;
  }

  private buildPaths(peers: readonly Peer[], carrying: readonly AgentSyncState[]): PeerPath[] {
    const agents = carrying.map((st) => ({
      index: st.fabric.index,
      seen: this.seenOf(st),
    }));
    const sorted = this.sortedPeers(peers);
    const out: PeerPath[] = [];
    const stamp = ++this.pathBuilds;
    for (const p of sorted) {
      const kept = this.pathOf.get(p.node);
      if (kept && kept.peer === p && sameAgentsWord(kept, agents, p.node)) {
        kept.built = stamp;
        out.push(kept.path);
        continue;
      }
      const fresh: KeptPath = {
        built: stamp,
        peer: p,
        prefixes: agents.map((a) => a.index.prefixesOf(p.node)),
        seen: agents.map((a) => a.seen.get(p.node)),
        path: peerPath(
          p,
          agents.length,
          prefixesOfNode(agents, p.node),
          agents.flatMap((a) => a.seen.get(p.node) ?? []),
          this.clashOf(p.node),
        ),
      };
      this.pathOf.set(p.node, fresh);
      out.push(fresh.path);
    }
    if (this.pathOf.size > out.length)
      this.pathOf.forEach((kept, node) => {
        if (kept.built !== stamp) this.pathOf.delete(node);
      });
    return out;
  }

  /**
   * The agent's word per peer node, made again only for the nodes its PeerStatus messages moved since
   * the last time. A node the agent says the same of keeps its object: its path is then not made again.
   */
  private seenOf(st: AgentSyncState): Map<string, PeerSeenBy> {
    const book = st.peers;
    const kept = this.seen.get(st);
    if (kept?.revision === book.revision) return kept.byNode;
    const moved = kept && book.movedSince(kept.revision);
    const byNode = kept && moved ? kept.byNode : new Map<string, PeerSeenBy>();
    for (const node of moved ?? book.nodes()) {
      const states = book.statesOf(node);
      const by = states && seenByNode(st.agentId, states.values());
      const was = kept?.byNode.get(node);
      if (!by) byNode.delete(node);
      else byNode.set(node, was && sameSeenBy(was, by) ? was : by);
    }
    this.seen.set(st, { revision: book.revision, byNode });
    return byNode;
  }

  /** The table's other nodes by name, sorted once per table. */
  private sortedPeers(peers: readonly Peer[]): readonly Peer[] {
    if (this.sorted?.peers === peers) return this.sorted.value;
    const value = peers
      .filter((p) => p.node !== this.node)
      .sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
    this.sorted = { peers, value };
    return value;
  }
}

/** A peer node's path as last made, and the agents' word it was made from. */
interface KeptPath {
  /** The last build that listed it. */
  built: number;
  peer: Peer;
  /** Per carrying agent (in order): the prefixes it routes to the node. */
  prefixes: Array<readonly string[] | undefined>;
  /** Per carrying agent: its PeerStatus of the node. */
  seen: Array<PeerSeenBy | undefined>;
  path: PeerPath;
}

interface AgentWord {
  index: AgentFabricIndex;
  seen: Map<string, PeerSeenBy>;
}

/** Whether the agents still say of `node` what the kept path was made from. */
function sameAgentsWord(kept: KeptPath, agents: readonly AgentWord[], node: string): boolean {
  if (kept.prefixes.length !== agents.length) return false;
  for (let i = 0; i < agents.length; i++) {
    const a = agents[i] as AgentWord;
    if (a.index.prefixesOf(node) !== kept.prefixes[i] || a.seen.get(node) !== kept.seen[i]) return false;
  }
  return true;
}

/** Every prefix some agent routes to the node, sorted; undefined when none holds a tunnel endpoint of it. */
function prefixesOfNode(agents: readonly AgentWord[], node: string): readonly string[] | undefined {
  let prefixes: readonly string[] | undefined;
  for (const a of agents) {
    const mine = a.index.prefixesOf(node);
    if (!mine) continue;
    prefixes = prefixes ? [...new Set([...prefixes, ...mine])].sort() : mine;
  }
  return prefixes;
}

/** Through the DPUs when some agent holds a tunnel endpoint of the peer, else why not. */
function peerPath(
  p: Peer,
  agents: number,
  prefixes: readonly string[] | undefined,
  seenBy: PeerSeenBy[],
  clash: string | undefined,
): PeerPath {
  const base = { node: p.node, ...(seenBy.length > 0 ? { seenBy } : {}) };
  if (prefixes) return { ...base, path: 'vxlan', prefixes: [...prefixes] };
  const reason =
    clash ??
    (agents === 0
      ? 'no DPU agent of this node carries the fabric'
      : !p.vtep && (p.endpoints ?? []).length === 0
        ? 'it publishes no VTEP and no DPU endpoint'
        : 'no tunnel endpoint of it has an address the DPUs can reach');
  return { ...base, path: 'unreachable', reason, prefixes: [...p.prefixes].sort() };
}

/**
 * One agent's word on one peer node: a node reached through several tunnel endpoints (its VXLAN
 * device, its DPUs) is reachable and offloaded when every one of them is, its packets summed, its
 * last error the first one by object name (and named by it).
 */
function seenByNode(agentId: string, states: Iterable<PeerState>): PeerSeenBy | undefined {
  const sorted = [...states].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  let by: PeerSeenBy | undefined;
  for (const p of sorted) {
    if (!by) {
      by = {
        endpoint: agentId,
        reachable: p.reachable,
        offloaded: p.offloaded,
        txPackets: p.txPackets,
        rxPackets: p.rxPackets,
        lastError: p.lastError ? `${p.name}: ${p.lastError}` : '',
      };
      continue;
    }
    by.reachable &&= p.reachable;
    by.offloaded &&= p.offloaded;
    by.txPackets += p.txPackets;
    by.rxPackets += p.rxPackets;
    if (!by.lastError && p.lastError) by.lastError = `${p.name}: ${p.lastError}`;
  }
  return by;
}

function sameSeenBy(a: PeerSeenBy, b: PeerSeenBy): boolean {
  return (
    a.endpoint === b.endpoint &&
    a.reachable === b.reachable &&
    a.offloaded === b.offloaded &&
    a.txPackets === b.txPackets &&
    a.rxPackets === b.rxPackets &&
    a.lastError === b.lastError
  );
}

/** Whether two lists of a derived value's inputs are the same values (objects by identity). */
function sameInputs(a: readonly unknown[], b: readonly unknown[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
