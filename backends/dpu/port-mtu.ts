import type { AttachmentView } from '../../core/backend';
import { failedPrecondition } from '../../core/errors';
import type { Netns } from '../../lib/netns/netns-handle';
import { getLink } from '../../lib/rtnetlink/link';
import { NetlinkSocket } from '../../lib/rtnetlink/socket';
import { AckCode } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { IPV6_MIN_MTU } from '../interface/link-local';
import { setWorkloadEndMtu } from '../interface/workload-mtu';
import { nackError } from './ack-code';
import type { AckWaiter } from './ack-waiter';
import { checkCapabilities } from './agent-capabilities';
import type { AgentLink } from './agent-link';
import type { AgentSession } from './agent-session';
import type { AgentSync } from './agent-sync';
import { decodeDetails } from './details';
import type { DesiredState } from './desired-state';
import type { PortFields } from './port-spec';

// A running DPU port given another MTU in place (the network's MTU, or what the DPU's uplink carries,
// changed since it was attached): the port goes to its agent again with the new MTU (the agent sets
// it on its side, the representor), and the daemon sets it on the VF it moved into the workload, with
// the workload's routes that carry an MTU of their own. Attaching again would give the workload a new
// interface. Going down, the workload's end shrinks first, so it stops sending what the representor
// would drop; going up, the agent's end grows first.

export interface PortMtuDeps {
  desired: DesiredState;
  sync: AgentSync;
  link: AgentLink;
  acks: AckWaiter;
  ackTimeoutMs: number;
  /** Waits a little for the port's agent right after a daemon restart (dpu-backend.ts). */
  awaitAgent(agentId: string): Promise<void>;
}

/** Gives the attachment's port and VF `mtu`. The caller holds the port's lock. */
export async function setPortMtu(
  deps: PortMtuDeps,
  att: AttachmentView,
  netns: Netns,
  mtu: number,
): Promise<{ before: number; routes: number }> {
  const entry = deps.desired.get(att.key);
  if (!entry) throw failedPrecondition(`port ${att.key} is not in the DPU desired state`);
  if (mtu < IPV6_MIN_MTU && att.ips.some((i) => i.family === 6))
    throw failedPrecondition(
      `${att.key}: MTU ${mtu} is below IPv6's minimum (${IPV6_MIN_MTU}); the interface would lose its IPv6 addresses`,
    );
  await deps.awaitAgent(entry.agentId);
  const s = deps.link.requireHealthy(entry.agentId);
  const fields: PortFields = { ...entry.port, mtu };
  checkCapabilities(s, { key: att.key, ips: att.ips, mtu }, fields);
  // A port its agent exposes to the host as no netdev has no end in the workload: only the agent's.
  const stored = decodeDetails(att.dataplane);
  if (!entry.plumbed && !stored?.endpoint) {
    await agentSide(deps, s, att.key, entry.port.mtu === mtu ? undefined : fields);
    return { before: entry.port.mtu, routes: 0 };
  }
  const sock = NetlinkSocket.openIn(netns);
  try {
    // Only the link this daemon moved in: its index as recorded, carrying the port's MAC.
    const index = entry.plumbed?.linkIndex || stored?.ifIndex || 0;
    const link = await getLink(sock, { name: att.ifName });
    if (!link || link.index !== index || link.mac !== entry.port.mac)
      throw failedPrecondition(
        `${att.key}: ${att.ifName} in the workload's namespace is ${link ? 'not' : 'missing, so not'} the VF moved in for this port (index ${index}, MAC ${entry.port.mac}); not changing it`,
      );
    if (mtu === link.mtu && entry.port.mtu === mtu) return { before: link.mtu, routes: 0 };
    const agent = (): Promise<void> =>
      agentSide(deps, s, att.key, entry.port.mtu === mtu ? undefined : fields);
    let routes: number;
    if (mtu < link.mtu) {
      routes = await setWorkloadEndMtu(sock, link, mtu);
      await agent();
    } else {
      await agent();
      routes = await setWorkloadEndMtu(sock, link, mtu);
    }
    return { before: link.mtu, routes };
  } finally {
    void sock.close();
  }
}

/** The port again at a new generation with `fields` (none: it has them already), acknowledged. */
async function agentSide(
  deps: PortMtuDeps,
  s: AgentSession,
  key: string,
  fields: PortFields | undefined,
): Promise<void> {
  if (!fields) return;
  // The same port, plumbed where it was: a new generation does not move it.
  const port = deps.sync.change(fields, s.agentId);
  if (!port) throw failedPrecondition(`port ${key} is no longer in the DPU desired state`);
  const who = `MTU ${fields.mtu} of port ${key} (generation ${port.generation}) on DPU agent ${s.agentId}`;
  const acked = deps.acks.wait(key, port.generation, s.id, deps.ackTimeoutMs, who);
  s.send({ upsert: { port } });
  const ack = await acked;
  if (ack.code !== AckCode.ACK_CODE_OK) throw nackError(ack, who);
}
