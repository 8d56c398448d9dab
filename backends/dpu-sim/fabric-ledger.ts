// Which fabric object holds each kernel entry of ours in the DPU namespace, what each object has
// programmed, why one is not (fully) programmed, and which wait for an entry another holds. Its own
// file because it is the bookkeeping of ownership, apart from the sending (netns-fabric.ts): the
// kernel keeps one FDB entry per VTEP MAC and one route per prefix and metric, so the first object to
// want an entry holds it; another that wants it is refused and waits for that one key, and is
// converged again the moment its holder gives the key up.

import type { Logger } from 'pino';
import { describeFdb, describeNeighbour, describeRoute } from '../../lib/overlay';
import type { FabricOutcome } from './dataplane';
import type { FabricTable } from './fabric-table';
import { wantsOf, type Wanted, type WantedFdb } from './vxlan-programming';

/** What converging one object takes: computed for every object of a batch before anything is sent. */
export interface Plan {
  name: string;
  /** What it had programmed (the live map: removals are taken out of it as they succeed). */
  before: Map<string, Wanted>;
  next: Map<string, Wanted>;
  adds: Wanted[];
  dels: Wanted[];
  blocked: string | undefined;
  conflict: boolean;
  /** The key another object holds, that this one waits for. */
  waitsFor: string | undefined;
  failures: string[];
}

export function describe(w: Wanted): string {
  if (w.kind === 'fdb') return describeFdb(w);
  if (w.kind === 'neighbour') return describeNeighbour(w);
  return describeRoute(w);
}

function fingerprint(w: Wanted): string {
  return JSON.stringify(w);
}

export class FabricLedger {
  /** Kernel objects each fabric object has in the kernel now, by key. */
  private readonly programmed = new Map<string, Map<string, Wanted>>();
  /** Which object holds each key. */
  private readonly owners = new Map<string, string>();
  /** Keys of routes of our protocol in the kernel (a route we may replace, not a foreign one). */
  readonly ourRoutes = new Set<string>();
  /** Why an object is not (fully) programmed: the last error, or what it waits for. */
  readonly errors = new Map<string, string>();
  /** Objects held back by another's key: name → that key. */
  private readonly waiting = new Map<string, string>();

  constructor(private readonly log: Logger) {}

  /** The object that holds a key, if one does. */
  ownerOf(key: string): string | undefined {
    return this.owners.get(key);
  }

  /** The FDB entry programmed for a MAC, if an object holds one. */
  programmedFdb(key: string): WantedFdb | undefined {
    const owner = this.owners.get(key);
    const want = owner === undefined ? undefined : this.programmed.get(owner)?.get(key);
    return want?.kind === 'fdb' ? want : undefined;
  }

  get waitingCount(): number {
    return this.waiting.size;
  }

  /** The objects waiting for a key nobody holds now (those gone from the table are forgotten). */
  freed(table: FabricTable): string[] {
    const out: string[] = [];
    for (const [name, key] of this.waiting) {
      if (!table.get(name)) {
        this.waiting.delete(name);
        continue;
      }
      const owner = this.owners.get(key);
      if (owner === undefined || owner === name) out.push(name);
    }
    return out;
  }

  /** The device died with its entries (and routes over it): they are no longer ours to delete. */
  forgetDeviceEntries(): void {
    for (const map of this.programmed.values())
      for (const [key, w] of map) {
        if (w.kind === 'route' && !w.overVxlan) continue;
        map.delete(key);
        this.owners.delete(key);
        if (w.kind === 'route') this.ourRoutes.delete(key);
      }
  }

  /**
   * What each object wants added and removed. Keys are checked against their owners as they will be
   * once the objects planned before have converged: a key one of them gives up is free for a later
   * one, and a key one of them takes is not. `device`: our device's ifindex, when there is one.
   */
  plan(table: FabricTable, names: readonly string[], device: number | undefined): Plan[] {
    const planned = new Map<string, string | undefined>();
    const ownerOf = (key: string): string | undefined =>
      planned.has(key) ? planned.get(key) : this.owners.get(key);
    return names.map((name) => {
      const wants = wantsOf(table, name);
      const before = this.programmed.get(name) ?? new Map<string, Wanted>();
      const next = new Map<string, Wanted>();
      let blocked = wants.blocked;
      let conflict = wants.conflict ?? false;
      let waitsFor: string | undefined;
      for (const w of wants.objects) {
        const owner = ownerOf(w.key);
        if (owner !== undefined && owner !== name) {
          blocked = `${describe(w)} is already programmed for ${owner}`;
          conflict = true;
          waitsFor = w.key;
          next.clear();
          break;
        }
        if ((w.kind !== 'route' || w.overVxlan) && device === undefined) {
          blocked ??= 'waiting for the local VTEP (object "vtep")';
          next.clear();
          break;
        }
        next.set(w.key, w);
      }
      const adds: Wanted[] = [...next.values()].filter(
        (w) => before.get(w.key) === undefined || fingerprint(before.get(w.key)!) !== fingerprint(w),
      );
      const dels: Wanted[] = [...before.values()].filter((w) => !next.has(w.key));
      for (const w of dels) planned.set(w.key, undefined);
      for (const w of adds) planned.set(w.key, name);
      return { name, before, next, adds, dels, blocked, conflict, waitsFor, failures: [] };
    });
  }

  /** The kernel removed `w` of `p` (or it was gone already). */
  removed(p: Plan, w: Wanted): void {
    p.before.delete(w.key);
    this.owners.delete(w.key);
    if (w.kind === 'route') this.ourRoutes.delete(w.key);
  }

  /** The kernel holds `w` for `p` now. */
  added(p: Plan, w: Wanted): void {
    this.owners.set(w.key, p.name);
    if (w.kind === 'route') this.ourRoutes.add(w.key);
  }

  /** Records what an object holds now that its requests were answered; its outcome. */
  settle(table: FabricTable, p: Plan): FabricOutcome {
    const { name, before, next, failures } = p;
    if (p.waitsFor !== undefined && table.get(name)) this.waiting.set(name, p.waitsFor);
    else this.waiting.delete(name);
    // What could not be removed is still ours to remove later.
    for (const [key, w] of before) if (!next.has(key) && this.owners.get(key) === name) next.set(key, w);
    if (next.size > 0) this.programmed.set(name, next);
    else this.programmed.delete(name);
    if (failures.length > 0) {
      const message = failures.join('; ');
      this.errors.set(name, message);
      this.log.warn({ object: name, err: message }, 'fabric object programming failed');
      return { code: 'failed', message };
    }
    if (p.blocked !== undefined && table.get(name)) {
      this.errors.set(name, p.blocked);
      this.log.debug({ object: name, blocked: p.blocked }, 'fabric object not programmed');
      return p.conflict ? { code: 'invalid', message: p.blocked } : { code: 'ok', message: '' };
    }
    this.errors.delete(name);
    return { code: 'ok', message: '' };
  }
}
