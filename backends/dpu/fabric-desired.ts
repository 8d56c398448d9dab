import { isDeepStrictEqual } from 'node:util';
import type { FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
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
  ack: FabricAck | undefined;
}

/** What setting a new plan changed: what to send. */
export interface FabricChanges {
  upserts: FabricObject[];
  deletes: Array<{ name: string; generation: number }>;
}

export class FabricDesired {
  private readonly objects = new Map<string, Entry>();
  /** Whether a plan was ever set: before that the agent's table is not known. */
  planned = false;

  /** Replaces the desired objects with `plan`; `nextGeneration` gives each change its generation. */
  set(plan: ReadonlyMap<string, FabricBody>, nextGeneration: () => number): FabricChanges {
    this.planned = true;
    const changes: FabricChanges = { upserts: [], deletes: [] };
    for (const [name, body] of plan) {
      const old = this.objects.get(name);
      if (old && isDeepStrictEqual(withoutGeneration(old.object), body)) continue;
      const object: FabricObject = { ...body, name, generation: nextGeneration() };
      this.objects.set(name, { object, ack: undefined });
      changes.upserts.push(object);
    }
    for (const name of [...this.objects.keys()]) {
      if (plan.has(name)) continue;
      this.objects.delete(name);
      changes.deletes.push({ name, generation: nextGeneration() });
    }
    return changes;
  }

  /**
   * Forgets every ack: a new session of the agent (a reboot, say) must acknowledge its objects again
   * before the node counts them as held.
   */
  clearAcks(): void {
    for (const e of this.objects.values()) e.ack = undefined;
  }

  get(name: string): FabricObject | undefined {
    return this.objects.get(name)?.object;
  }

  /** Records an ack if it is for the current generation; returns whether it was. */
  recordAck(name: string, ack: FabricAck): boolean {
    const entry = this.objects.get(name);
    if (entry?.object.generation !== ack.generation) return false;
    entry.ack = ack;
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
    let n = 0;
    for (const e of this.objects.values()) if (e.ack?.ok) n++;
    return n;
  }

  /** Objects the agent refused at their current generation, with its message. */
  failures(): Array<{ name: string; message: string }> {
    const out: Array<{ name: string; message: string }> = [];
    for (const e of this.objects.values())
      if (e.ack && !e.ack.ok) out.push({ name: e.object.name, message: e.ack.message });
    return out;
  }

  /** Acked objects of each kind, as the agent holds them now. */
  heldCounts(): { peers: number; routes: number } {
    let peers = 0;
    let routes = 0;
    for (const e of this.objects.values()) {
      if (!e.ack?.ok) continue;
      if (e.object.peer) peers++;
      else if (e.object.peerRoute) routes++;
    }
    return { peers, routes };
  }

  /** Every current object, for report (peer paths). */
  values(): FabricObject[] {
    return [...this.objects.values()].map((e) => e.object);
  }
}

function withoutGeneration(o: FabricObject): FabricBody {
  const { generation: _generation, ...body } = o;
  return body;
}
