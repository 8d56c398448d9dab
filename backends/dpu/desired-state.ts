import type { Endpoint, Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { WorkloadPlacement } from './host-side';
import type { PortFields } from './port-spec';

// The ports the daemon wants its agents to hold, each tagged with a generation and with the agent it
// was placed on (a port never moves between agents on its own). This is the only thing ever sent to
// an agent: a snapshot of its ports on every (re)connect, and single changes in between. Generations
// come from one counter per process, so a name that is deleted and added again never reuses a
// generation an old ack could still carry.

/** What the agent last said about a port. */
export interface PortAck {
  generation: number;
  ok: boolean;
  message: string;
  endpoint?: Endpoint;
  /** The boot id of the agent that named `endpoint`: a VF is that boot's (see AgentSync.endpointOf). */
  bootId?: string;
}

export interface DesiredPort {
  port: Port;
  /** The agent the port is placed on. */
  agentId: string;
  /** The last ack at the current generation, if any. */
  ack?: PortAck;
  /** Set by an unsolicited PortStatus from the agent. */
  operState?: 'up' | 'down';
  /** Where the port's host end was plumbed, so that a VF the agent re-creates can be put back. */
  placement?: WorkloadPlacement;
  /** The link moved into the workload: what Detach moves out, under the name it came in with. */
  plumbed?: PlumbedLink;
}

export interface PlumbedLink {
  /** Its name in the host namespace, before the move. */
  netdev: string;
  /** Its index in the workload namespace; 0 when not known (a record from before it was kept). */
  linkIndex: number;
}

export class DesiredState {
  private readonly ports = new Map<string, DesiredPort>();
  /** Ports per agent, for placement (kept, not counted, since it is asked on every attach). */
  private readonly perAgent = new Map<string, number>();
  private lastGeneration = 0;

  /** A generation newer than every one given so far (ports' and, through AgentSync, fabric objects'). */
  nextGeneration(): number {
    this.lastGeneration += 1;
    return this.lastGeneration;
  }

  /** Sets a port's desired fields on `agentId` and returns it with a fresh generation. */
  upsert(fields: PortFields, agentId: string): Port {
    const port = withGeneration(fields, this.nextGeneration());
    this.put(entryFor(port, agentId));
    return port;
  }

  /**
   * A new generation of a port that stays where it is (another MTU): its agent, its placement, the link
   * moved in and its last ack (the older generation's until the agent acks this one) are kept, so that
   * its endpoint stays the one the daemon plumbed. Undefined when the port is not desired.
   */
  change(fields: PortFields): Port | undefined {
    const old = this.ports.get(fields.name);
    if (!old) return undefined;
    const port = withGeneration(fields, this.nextGeneration());
    this.ports.set(port.name, { ...old, port });
    return port;
  }

  private put(entry: DesiredPort): void {
    this.drop(entry.port.name);
    this.ports.set(entry.port.name, entry);
    this.perAgent.set(entry.agentId, (this.perAgent.get(entry.agentId) ?? 0) + 1);
  }

  private drop(name: string): boolean {
    const old = this.ports.get(name);
    if (!old) return false;
    this.ports.delete(name);
    const n = (this.perAgent.get(old.agentId) ?? 1) - 1;
    if (n > 0) this.perAgent.set(old.agentId, n);
    else this.perAgent.delete(old.agentId);
    return true;
  }

  /**
   * Puts back a port recorded before a restart, keeping its generation, and moves the counter past
   * it so later changes are newer than anything restored.
   */
  restore(
    fields: PortFields,
    generation: number,
    agentId: string,
    endpoint?: Endpoint,
    placement?: WorkloadPlacement,
    endpointBootId?: string,
    linkIndex = 0,
  ): Port {
    const port = withGeneration(fields, generation);
    this.lastGeneration = Math.max(this.lastGeneration, generation);
    const entry = entryFor(port, agentId, placement);
    // The restored port was acknowledged before the restart; remember the endpoint so detach and check
    // know where the host side lives even before the agent acks the snapshot.
    if (endpoint) {
      entry.ack = { generation, ok: true, message: 'restored', endpoint, bootId: endpointBootId };
      if (placement) entry.plumbed = { netdev: endpoint.netdev, linkIndex };
    }
    this.put(entry);
    return port;
  }

  /** Forgets a port; returns the generation its Delete carries, or undefined when it was not desired. */
  delete(name: string): number | undefined {
    if (!this.drop(name)) return undefined;
    return this.nextGeneration();
  }

  /** A generation for a Delete of a name that is not (or no longer) desired. */
  tombstoneGeneration(): number {
    return this.nextGeneration();
  }

  get(name: string): DesiredPort | undefined {
    return this.ports.get(name);
  }

  has(name: string): boolean {
    return this.ports.has(name);
  }

  get size(): number {
    return this.ports.size;
  }

  /** Ports placed on `agentId`. */
  countOn(agentId: string): number {
    return this.perAgent.get(agentId) ?? 0;
  }

  /** Agents that have ports placed on them. */
  agents(): string[] {
    return [...this.perAgent.keys()];
  }

  /** Every port of `agentId`, ordered by name so that two snapshots of the same state are identical. */
  snapshot(agentId: string): Port[] {
    const out: Port[] = [];
    for (const p of this.ports.values()) if (p.agentId === agentId) out.push(p.port);
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Records an ack if it is for the current generation; returns whether it was. */
  recordAck(name: string, ack: PortAck): boolean {
    const entry = this.ports.get(name);
    if (!entry || entry.port.generation !== ack.generation) return false;
    entry.ack = ack;
    return true;
  }

  /** Where the port's host end was plumbed, and the link moved in. */
  setPlacement(name: string, placement: WorkloadPlacement, plumbed: PlumbedLink): void {
    const entry = this.ports.get(name);
    if (!entry) return;
    entry.placement = placement;
    entry.plumbed = plumbed;
  }

  /** Every entry, for sweeps over the whole state. */
  entries(): IterableIterator<DesiredPort> {
    return this.ports.values();
  }

  /** Oper states are reports of one agent session; a new session reports afresh. */
  clearOperStates(agentId: string): void {
    for (const entry of this.ports.values()) if (entry.agentId === agentId) entry.operState = undefined;
  }

  /** Records a state `agentId` reported for a port it holds; false when the port is not its. */
  setOperState(name: string, state: 'up' | 'down', agentId: string): boolean {
    const entry = this.ports.get(name);
    if (entry?.agentId !== agentId) return false;
    entry.operState = state;
    return true;
  }
}

/**
 * The port with its generation, built field by field. Spreading `fields` into a new literal would be
 * shorter, but V8 gives every object cloned that way a hidden class of its own (a map and descriptor
 * array of ~400 bytes), which for ports held for the daemon's lifetime costs more than the ports do.
 */
function withGeneration(fields: PortFields, generation: number): Port {
  return {
    name: fields.name,
    generation,
    mac: fields.mac,
    ips: fields.ips,
    routes: fields.routes,
    mtu: fields.mtu,
    vlan: fields.vlan,
    vni: fields.vni,
    workloadId: fields.workloadId,
    ifName: fields.ifName,
    qos: fields.qos,
    pf: fields.pf,
  };
}

/**
 * An entry with every field present from the start, so that all entries share one layout with room
 * for the fields set later (an ack, a state, a placement) instead of growing a second array for them.
 */
function entryFor(port: Port, agentId: string, placement?: WorkloadPlacement): DesiredPort {
  return { port, agentId, ack: undefined, operState: undefined, placement, plumbed: undefined };
}
