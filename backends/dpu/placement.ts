import { exhausted, unavailable, type WorkloadNetError } from '../../core/errors';

// Which agent a new port goes to. The caller's choice wins; otherwise the healthy agent with the most
// free VFs, ties broken by id so that placement is predictable. A port already placed is never
// placed again (the backend keeps its agent), so this only runs for ports new to the daemon.

export interface PlacementCandidate {
  agentId: string;
  healthy: boolean;
  /** Ports the agent can hold in all; Infinity when it states no limit. */
  capacity: number;
  /** Ports placed on it now. */
  used: number;
}

export interface PlacementContext {
  /** Why this agent cannot take a port now (silent, disconnected, never seen). */
  whyUnavailable(agentId: string): string;
  /** Why no agent can (none is healthy). */
  whyNoneHealthy(): string;
}

export type Placement = { ok: true; agentId: string } | { ok: false; error: WorkloadNetError };

export function place(
  requested: string | undefined,
  candidates: readonly PlacementCandidate[],
  ctx: PlacementContext,
): Placement {
  if (requested) {
    const c = candidates.find((x) => x.agentId === requested);
    if (!c?.healthy) return { ok: false, error: unavailable(ctx.whyUnavailable(requested)) };
    if (c.used >= c.capacity) return { ok: false, error: exhausted(full(c)) };
    return { ok: true, agentId: c.agentId };
  }
  const healthy = candidates.filter((c) => c.healthy);
  if (healthy.length === 0) return { ok: false, error: unavailable(ctx.whyNoneHealthy()) };
  let best: PlacementCandidate | undefined;
  for (const c of healthy) {
    if (c.used >= c.capacity) continue;
    if (!best) {
      best = c;
      continue;
    }
    const free = c.capacity - c.used;
    const bestFree = best.capacity - best.used;
    if (free > bestFree || (free === bestFree && c.agentId < best.agentId)) best = c;
  }
  if (best) return { ok: true, agentId: best.agentId };
  return {
    ok: false,
    error: exhausted(
      healthy.length === 1
        ? full(healthy[0] as PlacementCandidate)
        : `every healthy DPU agent is full (${healthy.map((c) => `${c.agentId}: ${c.used}/${c.capacity}`).join(', ')}); detach a workload first`,
    ),
  };
}

function full(c: PlacementCandidate): string {
  return `DPU agent ${c.agentId} holds its maximum of ${c.capacity} ports; detach a workload first`;
}
