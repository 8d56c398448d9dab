import type { Peer } from '../../core/peer-source';
import type { Logger } from '../../core/logger';
import type { AgentLink } from './agent-link';
import type { AgentSession } from './agent-session';
import type { AgentSync } from './agent-sync';
import { endpointClash } from './endpoint-clash';
import { fabricCarriage } from './fabric-carriage';
import type { FabricAgent } from './fabric-plan';

// Which of the node's agents carry the fabric. An agent that can (fabric-carriage.ts) carries it only
// with a VTEP MAC no other node's VTEP or DPU states, and at an address no other DPU of this node has
// (nor, while MACs are derived from addresses alone, another node: endpoint-clash.ts): the holder is
// the incumbent and keeps it. The newcomer still serves
// ports, says why in its row of `workloadnet dpus` and the log, and is admitted the moment the holder
// is gone (a table without it, a DPU that moved). An agent admitted before the first table is checked
// against it when it comes: the cluster's nodes were there first.
//
// An admitted agent stays for the daemon's life, also while it is away (see dpu-fabric.ts); a refused
// one is forgotten with its session, and states its uplink again in its next hello.

export interface CarrierAdmissionDeps {
  node: string;
  link: AgentLink;
  sync: AgentSync;
  log: Logger;
  /** The node name VTEP MACs are derived with (FabricSettings.nodeName); none: from addresses alone. */
  named(): string | undefined;
  /** An agent's endpoint left this node: its plan goes with it. */
  left(agentId: string): void;
}

export class CarrierAdmission {
  /** Agents that carry the fabric, seen in this daemon's life, by id. */
  readonly agents = new Map<string, FabricAgent>();
  /** Agents whose endpoint clashes with a holder's, by id: admitted once it is gone. */
  private readonly refused = new Map<string, { agent: FabricAgent; why: string }>();
  /** Agents admitted before the first table, to be checked against it. */
  private readonly unchecked = new Set<string>();

  constructor(private readonly deps: CarrierAdmissionDeps) {}

  /** Records what the session says of its agent's endpoint; true when the endpoint set changed. */
  learn(s: AgentSession, peers: readonly Peer[] | undefined): boolean {
    const c = fabricCarriage(s.version, s.hello);
    const known = this.agents.get(s.agentId);
    if (!c.carries) {
      this.refused.delete(s.agentId);
      if (!known) return false;
      this.leave(s.agentId);
      this.deps.log.warn(
        { agentId: s.agentId, why: c.why },
        'DPU agent came back without the fabric; its endpoint leaves this node record',
      );
      return true;
    }
    if (known?.address === c.address && known.uplinkMtu === c.uplinkMtu) return false;
    const agent: FabricAgent = { id: s.agentId, address: c.address, uplinkMtu: c.uplinkMtu };
    // The same address at another MTU is still the incumbent's.
    const why =
      known?.address === c.address
        ? undefined
        : endpointClash(agent, this.deps.node, this.agents.values(), peers ?? [], this.deps.named());
    if (why !== undefined) {
      this.refuse(agent, why);
      if (!known) return false;
      this.leave(s.agentId);
      return true;
    }
    this.admit(agent, known?.address, peers);
    return true;
  }

  /** An agent's endpoint leaves this node: it carries nothing of the fabric any more. */
  private leave(agentId: string): void {
    this.agents.delete(agentId);
    this.unchecked.delete(agentId);
    this.deps.left(agentId);
    this.deps.sync.setFabric(agentId, new Map());
  }

  private admit(agent: FabricAgent, previous: string | undefined, peers: readonly Peer[] | undefined): void {
    this.refused.delete(agent.id);
    this.agents.set(agent.id, agent);
    if (!peers) this.unchecked.add(agent.id);
    this.deps.sync.setCarriage(agent.id, {
      carries: true,
      address: agent.address,
      uplinkMtu: agent.uplinkMtu,
    });
    this.deps.log.info(
      { agentId: agent.id, address: agent.address, uplinkMtu: agent.uplinkMtu, previous },
      'DPU agent carries the fabric: its VTEP is an endpoint of this node',
    );
  }

  private refuse(agent: FabricAgent, why: string): void {
    const was = this.refused.get(agent.id);
    this.refused.set(agent.id, { agent, why });
    this.deps.sync.setCarriage(agent.id, {
      carries: false,
      why: `refused: ${why}, which keeps it; it carries the fabric once that is gone`,
    });
    if (was?.why !== why || was.agent.address !== agent.address)
      this.deps.log.warn(
        { agentId: agent.id, address: agent.address, why },
        'DPU agent refused as a carrier of the fabric: its endpoint is held already; it serves ports only',
      );
  }

  /** Admits each refused agent still connected whose endpoint nothing holds now; true when one was. */
  readmit(peers: readonly Peer[] | undefined): boolean {
    let changed = false;
    for (const [id, { agent }] of this.refused) {
      if (!this.deps.link.sessionOf(id)) {
        // Its claim went with its session: a new one states its uplink again.
        this.refused.delete(id);
        continue;
      }
      const why = endpointClash(agent, this.deps.node, this.agents.values(), peers ?? [], this.deps.named());
      if (why !== undefined) this.refuse(agent, why);
      else {
        this.admit(agent, undefined, peers);
        changed = true;
      }
    }
    return changed;
  }

  /** Agents admitted before any table are refused when the first one shows their endpoint held. */
  checkFirstTable(peers: readonly Peer[]): boolean {
    if (this.unchecked.size === 0) return false;
    let changed = false;
    for (const id of this.unchecked) {
      const agent = this.agents.get(id);
      const why = agent && endpointClash(agent, this.deps.node, [], peers, this.deps.named());
      if (!agent || why === undefined) continue;
      this.leave(id);
      this.refuse(agent, why);
      changed = true;
    }
    this.unchecked.clear();
    return changed;
  }
}
