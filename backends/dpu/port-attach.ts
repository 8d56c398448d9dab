import type { AttachSpec, DataplaneResult } from '../../core/backend';
import { asWorkloadNetError, internal, unavailable } from '../../core/errors';
import type { Logger } from '../../core/logger';
import { AckCode, type Ack, type Endpoint, type Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { nackError } from './ack-code';
import type { AckWaiter } from './ack-waiter';
import { checkCapabilities, inventoryRefusal } from './agent-capabilities';
import type { AgentSession } from './agent-session';
import type { AgentSync } from './agent-sync';
import type { DesiredState } from './desired-state';
import { encodeDetails } from './details';
import { EndpointRefused, type HostSide } from './host-side';
import { macForKey, portFields, portOptions, type PortFields } from './port-spec';
import { placementOf } from './stored-ports';

// Attach on the DPU backend, top-down: the port is placed on an agent, made desired, sent, and once the
// agent acknowledged it, its host end (a VF) is moved into the workload. Each step that fails undoes
// what the agent holds right under it. Its own file: the backend wraps it in the port's lock and
// chooses the agent; the sequence itself is one operation a reader follows here from start to end.

/** Agent feature: acks carry a host netdev that the daemon moves into the workload namespace. */
export const FEATURE_HOST_ENDPOINT = 'host-endpoint';

export interface PortAttachDeps {
  desired: DesiredState;
  sync: AgentSync;
  acks: AckWaiter;
  ackTimeoutMs: number;
  hostSide: HostSide;
  log: Logger;
  /** The session the port goes to: the one it is placed on, else a new placement (dpu-backend.ts). */
  chooseAgent(spec: AttachSpec, port: PortFields): Promise<AgentSession>;
}

export async function attachPort(
  deps: PortAttachDeps,
  spec: AttachSpec,
  planned: DataplaneResult,
): Promise<DataplaneResult> {
  const { desired, sync, acks, ackTimeoutMs } = deps;
  const previous = desired.get(spec.key);
  // A repair carries no options of its own: the port keeps those it was given.
  const options = spec.dpuPort ?? (previous ? portOptions(previous.port) : undefined);
  const fields = portFields(spec, previous?.port.mac ?? macForKey(spec.key), options);
  const s = await deps.chooseAgent(spec, fields);
  checkCapabilities(s, spec, fields);
  const port = sync.upsert(fields, s.agentId);
  const who = `port ${spec.key} (generation ${port.generation}) on DPU agent ${s.agentId}`;

  let ack: Ack;
  try {
    const acked = acks.wait(spec.key, port.generation, s.id, ackTimeoutMs, who);
    if (!s.send({ upsert: { port } })) {
      acks.cancel(spec.key, unavailable(`${who}: the agent stream closed before the port was sent`));
    }
    ack = await acked;
  } catch (err) {
    sync.forget(spec.key, s.agentId, `attach failed: ${asWorkloadNetError(err).message}`);
    throw err;
  }
  if (ack.code !== AckCode.ACK_CODE_OK) {
    sync.forget(spec.key, s.agentId, 'attach failed: the agent could not program the port');
    throw nackError(ack, who);
  }

  const endpoint = ack.endpoint?.netdev ?? '';
  if (!endpoint && s.hello?.capabilities?.features.includes(FEATURE_HOST_ENDPOINT)) {
    await sync.remove(spec.key, s.agentId, 'attach failed: the ack named no host endpoint');
    throw internal(
      `${who} was acknowledged without a host endpoint although the agent advertises "${FEATURE_HOST_ENDPOINT}"`,
    );
  }
  let mac = ack.endpoint?.mac || port.mac;
  let ifIndex = 0;
  if (endpoint && ack.endpoint) ({ mac, ifIndex } = await moveEndpointIn(deps, s, spec, port, ack.endpoint));
  return {
    ...planned,
    mac,
    hostIfName: endpoint || undefined,
    details: encodeDetails({
      port: port.name,
      generation: port.generation,
      mac: port.mac,
      endpoint,
      agentId: s.agentId,
      bootId: s.bootId,
      pf: ack.endpoint?.pfIndex,
      vf: ack.endpoint?.vfIndex,
      pciAddress: ack.endpoint?.pciAddress ?? '',
      representor: ack.endpoint?.representor ?? '',
      ifIndex,
      portOptions: options ? JSON.stringify(options) : '',
    }),
  };
}

/**
 * Moves the acknowledged port's host end into the workload and records where it went. A netdev the
 * agent's inventory does not vouch for is refused; on any failure the agent's port is removed first.
 */
async function moveEndpointIn(
  deps: PortAttachDeps,
  s: AgentSession,
  spec: AttachSpec,
  port: Port,
  acked: Endpoint,
): Promise<{ mac: string; ifIndex: number }> {
  const { sync, log } = deps;
  const endpoint = acked.netdev;
  const refusal = inventoryRefusal(s, acked);
  if (refusal) {
    const failure = new EndpointRefused(
      `the DPU agent reported ${endpoint} as the host end of its port, but ${refusal}; refusing to move it into ${spec.netnsPath}`,
    );
    log.error({ port: spec.key, endpoint }, failure.message);
    await sync.remove(spec.key, s.agentId, `attach failed: ${failure.message}`);
    throw failure;
  }
  const placement = placementOf(spec);
  let plumbed: { mac: string; ifIndex: number };
  try {
    plumbed = await deps.hostSide.plumb({ ...placement, endpoint, mac: port.mac, netns: spec.netns });
  } catch (err) {
    const failure = asWorkloadNetError(err);
    if (failure instanceof EndpointRefused) log.error({ port: spec.key, endpoint }, failure.message);
    // The agent programmed the port and answers: the failed Attach returns once its VF is gone,
    // so that it leaves no interface behind on the node (after a timeout or a refusal to program
    // there is no answer to count on; the next snapshot settles those).
    await sync.remove(spec.key, s.agentId, `attach failed: ${failure.message}`);
    throw failure;
  }
  deps.desired.setPlacement(spec.key, placement, { netdev: endpoint, linkIndex: plumbed.ifIndex });
  return plumbed;
}
