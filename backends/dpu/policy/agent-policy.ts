import { isDeepStrictEqual } from 'node:util';
import type { PolicyObject } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { SET_PREFIX, type PolicyBody } from './policy-wire';

// The policy objects one agent should hold, each with its generation and the agent's last word on it,
// and who waits for which ack. Generations come from the ports' counter (DesiredState.nextGeneration),
// so a name removed and sent again never reuses one an old ack could carry. An object planned again
// unchanged keeps its generation: an apply that changes nothing sends nothing.

export interface PolicyAck {
  generation: number;
  ok: boolean;
  message: string;
}

interface Entry {
  object: PolicyObject;
  body: PolicyBody;
  ack?: PolicyAck;
}

interface Waiter {
  generation: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

/** What a new plan changed, in the order an agent must take it: sets before the ports naming them. */
export interface PolicyChanges {
  upserts: PolicyObject[];
  deletes: Array<{ name: string; generation: number }>;
}

const isSet = (name: string): boolean => name.startsWith(SET_PREFIX);

export class AgentPolicy {
  private readonly objects = new Map<string, Entry>();
  private readonly waiters = new Map<string, Waiter>();
  /** Whether a plan was set since start: before that, what the agent holds is not known to be stale. */
  planned = false;

  constructor(readonly agentId: string) {}

  set(plan: ReadonlyMap<string, PolicyBody>, nextGeneration: () => number): PolicyChanges {
    this.planned = true;
    const upserts: PolicyObject[] = [];
    for (const [name, body] of plan) {
      const old = this.objects.get(name);
      if (old && isDeepStrictEqual(old.body, body)) continue;
      const object: PolicyObject = { ...body, generation: nextGeneration() };
      this.objects.set(name, { object, body });
      upserts.push(object);
    }
    const deletes: PolicyChanges['deletes'] = [];
    for (const name of [...this.objects.keys()])
      if (!plan.has(name)) {
        this.objects.delete(name);
        deletes.push({ name, generation: nextGeneration() });
      }
    // A set goes before the port policies that name it, and after those that stop naming it are gone.
    upserts.sort((a, b) => Number(isSet(b.name)) - Number(isSet(a.name)));
    deletes.sort((a, b) => Number(isSet(a.name)) - Number(isSet(b.name)));
    return { upserts, deletes };
  }

  /** Every object, sets first, for a snapshot. */
  snapshot(): PolicyObject[] {
    const all = [...this.objects.values()].map((e) => e.object);
    return [...all.filter((o) => isSet(o.name)), ...all.filter((o) => !isSet(o.name))];
  }

  get size(): number {
    return this.objects.size;
  }

  /** Objects the agent refused at their current generation, with its word. */
  refused(): Array<{ name: string; message: string }> {
    const out: Array<{ name: string; message: string }> = [];
    for (const e of this.objects.values())
      if (e.ack && !e.ack.ok) out.push({ name: e.object.name, message: e.ack.message });
    return out;
  }

  /** Takes an ack; false when it is for no generation this agent was sent last (stale or unknown). */
  ack(name: string, ack: PolicyAck): boolean {
    const entry = this.objects.get(name);
    if (entry?.object.generation === ack.generation) entry.ack = ack;
    const w = this.waiters.get(name);
    if (w?.generation === ack.generation) {
      this.waiters.delete(name);
      if (ack.ok) w.resolve();
      else w.reject(new Error(ack.message || 'refused without a reason'));
      return true;
    }
    return entry?.object.generation === ack.generation;
  }

  /** Resolves once `name` is acked OK at `generation`; rejects on a refusal or failAll. */
  wait(name: string, generation: number): Promise<void> {
    const acked = this.objects.get(name)?.ack;
    if (acked?.generation === generation) {
      return acked.ok ? Promise.resolve() : Promise.reject(new Error(acked.message));
    }
    this.waiters.get(name)?.reject(new Error('superseded by a newer change'));
    return new Promise((resolve, reject) => this.waiters.set(name, { generation, resolve, reject }));
  }

  /**
   * Every wait ends with `err`. After a timeout (`forget`), what the agent never confirmed is forgotten,
   * so that the next plan sends it again and waits for it: an apply that changed nothing would otherwise
   * pass while the agent holds none of it. After a lost session it is kept: the next session's snapshot
   * lists it, and the agent acks it there.
   */
  failAll(err: (name: string) => Error, forget = false): void {
    for (const [name, w] of this.waiters) {
      w.reject(err(name));
      const entry = this.objects.get(name);
      if (forget && !entry?.ack?.ok) this.objects.delete(name);
    }
    this.waiters.clear();
  }
}
