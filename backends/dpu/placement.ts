import type { AttachSpec } from '../../core/backend';
import { exhausted, invalidArgument, unavailable, type WorkloadNetError } from '../../core/errors';
import { vfSettingsRefusal } from './agent-capabilities';
import type { AgentLink } from './agent-link';
import type { AgentSession } from './agent-session';
import type { DesiredState } from './desired-state';
import { featuresNeeded, type PortFields } from './port-spec';

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

/**
 * The agent a port new to the daemon goes to, among the agents holding a session; throws why none can
 * take it.
 */
export function placeNewPort(
  spec: Pick<AttachSpec, 'key' | 'dpu'>,
  port: Pick<PortFields, 'qos' | 'pf'>,
  link: AgentLink,
  desired: DesiredState,
): string {
  let candidates = candidatesOf(link, desired);
  // Unasked, a port that needs VF settings goes only to an agent that can apply them.
  const needed = featuresNeeded(port);
  if (!spec.dpu && needed.length > 0) {
    const healthy = candidates.filter((c) => c.healthy);
    const able = new Set(
      link
        .sessions()
        .filter((x) => vfSettingsRefusal(x, spec.key, port) === undefined)
        .map((x) => x.agentId),
    );
    candidates = candidates.filter((c) => able.has(c.agentId));
    if (healthy.length > 0 && !candidates.some((c) => c.healthy)) {
      throw invalidArgument(
        `no healthy DPU agent supports what ${spec.key} asks for (${needed.map(([, what]) => what).join(', ')}${port.pf !== undefined ? ` on PF ${port.pf}` : ''}); agents: ${healthy.map((c) => c.agentId).join(', ')}`,
      );
    }
  }
  const chosen = place(spec.dpu || undefined, candidates, link);
  if (!chosen.ok) throw chosen.error;
  return chosen.agentId;
}

/** Every agent holding a session, with its room for ports. */
function candidatesOf(link: AgentLink, desired: DesiredState): PlacementCandidate[] {
  return link.sessions().map((s) => ({
    agentId: s.agentId,
    healthy: s.healthy,
    capacity: capacityOf(s),
    used: desired.countOn(s.agentId),
  }));
}

/**
 * Ports an agent can hold: its VFs when it reported an inventory, bounded by the max_ports of its
 * hello; no stated limit is unlimited.
 */
function capacityOf(s: AgentSession): number {
  const maxPorts = s.hello?.capabilities?.maxPorts || Number.POSITIVE_INFINITY;
  const inv = s.inventory;
  return inv ? Math.min(inv.vfTotal, maxPorts) : maxPorts;
}

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
