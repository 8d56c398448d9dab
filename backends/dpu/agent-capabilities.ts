import type { AttachSpec } from '../../core/backend';
import { invalidArgument } from '../../core/errors';
import type { Endpoint } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentSession } from './agent-session';
import { featuresNeeded, type PortFields } from './port-spec';

// What an agent said it can do (the capabilities and features of its hello) and what it has (its
// inventory), held against a port before anything is sent to the agent, and against the endpoint it
// names before anything is moved on its word. An agent is refused up front, with the reason, rather
// than left to fail a port halfway.

/** Refuses, before anything is sent, what the agent said in its hello that it cannot do. */
export function checkCapabilities(
  s: AgentSession,
  spec: Pick<AttachSpec, 'key' | 'ips' | 'mtu'>,
  port: PortFields,
): void {
  const refusal = vfSettingsRefusal(s, spec.key, port);
  if (refusal) throw invalidArgument(refusal);
  const caps = s.hello?.capabilities;
  if (!caps) return;
  const v6 = spec.ips.find((i) => i.family === 6);
  if (v6 && !caps.ipv6) {
    throw invalidArgument(
      `DPU agent ${s.agentId} does not support IPv6, but ${spec.key} was given ${v6.address}; use an IPv4-only pool`,
    );
  }
  if ((caps.minMtu && spec.mtu < caps.minMtu) || (caps.maxMtu && spec.mtu > caps.maxMtu)) {
    throw invalidArgument(
      `MTU ${spec.mtu} is outside what DPU agent ${s.agentId} supports (${caps.minMtu || 'any'}-${caps.maxMtu || 'any'})`,
    );
  }
}

/**
 * Why an agent cannot apply a port's VF settings (QoS, PF choice), or undefined when it can or the port
 * has none. Placement skips such agents; a port placed on one by name is refused before sending.
 */
export function vfSettingsRefusal(
  s: AgentSession,
  key: string,
  port: Pick<PortFields, 'qos' | 'pf'>,
): string | undefined {
  const needed = featuresNeeded(port);
  if (needed.length === 0) return undefined;
  if (s.version < 2) {
    return `DPU agent ${s.agentId} speaks protocol version ${s.version}, which carries no VF settings, but ${key} asks for ${needed.map(([, what]) => what).join(', ')}`;
  }
  for (const [feature, what] of needed) {
    if (!s.hasFeature(feature))
      return `DPU agent ${s.agentId} does not support ${what} (it does not advertise "${feature}"), which ${key} asks for`;
  }
  const inv = s.inventory;
  if (port.pf !== undefined && inv && !inv.hasPf(port.pf)) {
    return `DPU agent ${s.agentId} has no PF ${port.pf} (its PFs: ${inv.pfs.map((pf) => `${pf.index} ${pf.name}`).join(', ') || 'none'})`;
  }
  return undefined;
}

/**
 * Why the endpoint an agent named is not one of its VFs, or undefined when it is. Version 1 agents
 * send no inventory, and only the host guard applies to them; a version 2 agent's endpoint must be a
 * VF its inventory lists (which also keeps it from naming another agent's VF), with the PF and VF
 * index the inventory gives it.
 */
export function inventoryRefusal(s: AgentSession, endpoint: Endpoint): string | undefined {
  if (s.version < 2) return undefined;
  const inv = s.inventory;
  if (!inv) return `DPU agent ${s.agentId} has sent no inventory, so no VF of it can be vouched for`;
  const vf = inv.vf(endpoint.netdev);
  if (!vf) return `it is not a VF in DPU agent ${s.agentId}'s inventory`;
  if (
    (endpoint.pfIndex !== undefined && endpoint.pfIndex !== vf.pf) ||
    (endpoint.vfIndex !== undefined && endpoint.vfIndex !== vf.vf)
  ) {
    return `the ack names it PF ${endpoint.pfIndex ?? '-'} VF ${endpoint.vfIndex ?? '-'}, but the inventory lists it as PF ${vf.pf} VF ${vf.vf}`;
  }
  return undefined;
}
