import { isDeepStrictEqual } from 'node:util';
import type { FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { AgentFabricIndex } from './agent-fabric-index';
import type { FabricBody } from './fabric-plan';

// The fabric objects one agent should hold, each with its generation and the agent's last word on it:
// the fabric's counterpart of DesiredState's ports, kept per agent in its AgentSyncState. Generations
// come from the same per-process counter as ports' (DesiredState.nextGeneration), so a name removed
// and planned again never reuses one an old ack could carry. An object planned again unchanged keeps
// its generation and its ack: an apply that changes nothing sends nothing.

export interface FabricAck {
  generation: number;
  ok: boolean;
  message: string;
}

interface Entry {
  object: FabricObject;
  /** The plan's body it was made from: the same body planned again is unchanged without a compare. */
  body: FabricBody;
  ack: FabricAck | undefined;
}

/** What setting a new plan changed: what to send. */
export interface FabricChanges {
  upserts: FabricObject[];
  deletes: Array<{ name: string; generation: number }>;
  /** How many of the upserts replace an object held before (what it held may be free now). */
  replaced: number;
}

export class FabricDesired {
  private readonly objects = new Map<string, Entry>();
  /** Whether a plan was ever set: before that the agent's table is not known. */
  planned = false;
  /**
   * Grows whenever the set of objects or one of them changes (not on acks): what is derived from the
   * objects alone (the report's peer paths) is kept until it moves.
   */
  revision = 0;
  /** The objects per peer node (for the report), kept as they change. */
  readonly index = new AgentFabricIndex();
  // Counts kept as acks come and go: Status and readiness ask for them at every call, and a scan of
  // every object (10,000 at 5,000 peers) each time would make Status slow.
  private ackedOk = 0;
  private refused = 0;
  private heldPeers = 0;
  private heldRoutes = 0;

  /** Replaces the desired objects with `plan`; `nextGeneration` gives each change its generation. */
  set(plan: ReadonlyMap<string, FabricBody>, nextGeneration: () => number): FabricChanges {
    this.planned = true;
    const changes: FabricChanges = { upserts: [], deletes: [], replaced: 0 };
    // forEach, not for-of: for-of makes an entry array per object per apply, garbage at 10,000 objects.
    plan.forEach((body, name) => {
      const old = this.objects.get(name);
      if (old && (old.body === body || isDeepStrictEqual(old.body, body))) {
        old.body = body;
        return;
      }
      const object: FabricObject = { ...body, name, generation: nextGeneration() };
      if (old) {
        this.count(old.ack, old.object, -1);
        this.index.remove(old.object);
        changes.replaced++;
      }
      this.objects.set(name, { object, body, ack: undefined });
      this.index.add(object);
      changes.upserts.push(object);
    });
    // Every planned name is held now: anything more is what the plan dropped.
    if (this.objects.size > plan.size)
      this.objects.forEach((old, name) => {
        if (plan.has(name)) return;
        this.count(old.ack, old.object, -1);
        this.index.remove(old.object);
        this.objects.delete(name);
        changes.deletes.push({ name, generation: nextGeneration() });
      });
    if (changes.upserts.length + changes.deletes.length > 0) this.revision++;
    return changes;
  }

  /** Adds (or, with -1, takes away) what an ack of `object` counts for. */
  private count(ack: FabricAck | undefined, object: FabricObject, sign: 1 | -1): void {
    if (!ack) return;
    if (!ack.ok) {
      this.refused += sign;
      return;
    }
    this.ackedOk += sign;
    if (object.peer) this.heldPeers += sign;
    else if (object.peerRoute) this.heldRoutes += sign;
  }

  /**
   * Forgets every ack: a new session of the agent (a reboot, say) must acknowledge its objects again
   * before the node counts them as held.
   */
  clearAcks(): void {
    for (const e of this.objects.values()) e.ack = undefined;
    this.ackedOk = this.refused = this.heldPeers = this.heldRoutes = 0;
  }

  /**
   * Gives every object the agent refused a new generation (unacked again), for sending once more:
   * what blocked it may be gone. Returns them.
   */
  renewRefused(nextGeneration: () => number): FabricObject[] {
    const out: FabricObject[] = [];
    if (this.refused === 0) return out;
    for (const e of this.objects.values()) {
      if (!e.ack || e.ack.ok) continue;
      this.count(e.ack, e.object, -1);
      e.object = { ...e.object, generation: nextGeneration() };
      e.ack = undefined;
      out.push(e.object);
    }
    return out;
  }

  get(name: string): FabricObject | undefined {
    return this.objects.get(name)?.object;
  }

  /** Records an ack if it is for the current generation; returns whether it was. */
  recordAck(name: string, ack: FabricAck): boolean {
    const entry = this.objects.get(name);
    if (entry?.object.generation !== ack.generation) return false;
    this.count(entry.ack, entry.object, -1);
    entry.ack = ack;
    this.count(ack, entry.object, 1);
    return true;
  }

  /** Every object, ordered by name so that two snapshots of the same state are identical. */
  snapshot(): FabricObject[] {
    return [...this.objects.values()]
      .map((e) => e.object)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  get size(): number {
    return this.objects.size;
  }

  /** Objects acked OK at their current generation. */
  get acked(): number {
    return this.ackedOk;
  }

  /** How many objects the agent refused at their current generation. */
  get failed(): number {
    return this.refused;
  }

  /** Objects the agent refused at their current generation, with its message. */
  failures(): Array<{ name: string; message: string }> {
    const out: Array<{ name: string; message: string }> = [];
    if (this.refused === 0) return out;
    for (const e of this.objects.values())
      if (e.ack && !e.ack.ok) out.push({ name: e.object.name, message: e.ack.message });
    return out;
  }

  /** Acked objects of each kind, as the agent holds them now. */
  heldCounts(): { peers: number; routes: number } {
    return { peers: this.heldPeers, routes: this.heldRoutes };
  }
}
