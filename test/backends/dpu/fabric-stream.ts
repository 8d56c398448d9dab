import {
  ObjectKind,
  type AgentMessage,
  type ControllerMessage,
  type FabricObject,
  type Hello,
} from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { ackEveryFabricObject as ackEach } from '../../support/acking-agent';
import { okAck } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';

// What a hand-driven agent of protocol version 3 says and reads of the fabric: its hello, its acks of
// fabric objects, the upserts and snapshots the daemon sends it.

export function v3Hello(agentId: string, over: Partial<Hello> = {}): AgentMessage {
  return RawAgent.hello(agentId, {
    protocolVersion: 1,
    minProtocolVersion: 1,
    maxProtocolVersion: 3,
    uplinkAddresses: ['10.0.1.11'],
    uplinkMtu: 1500,
    capabilities: { maxPorts: 0, ipv6: true, minMtu: 68, maxMtu: 9216, features: ['fabric-vxlan'] },
    ...over,
  });
}

export const fabricAck = (o: FabricObject, more: Partial<AgentMessage['ack']> = {}): AgentMessage =>
  okAck(o.name, o.generation, { kind: ObjectKind.OBJECT_KIND_FABRIC, ...more });

/** The fabric upserts received from index `from` on. */
export const fabricUpserts = (a: RawAgent, from = 0): FabricObject[] =>
  a.received.slice(from).flatMap((m) => (m.upsert?.fabric ? [m.upsert.fabric] : []));

/** The snapshot that starts at or after `from`: its begin, its fabric objects and its end. */
export async function snapshot(
  a: RawAgent,
  from = 0,
  timeoutMs = 5000,
): Promise<{ begin: ControllerMessage; fabric: FabricObject[]; end: ControllerMessage }> {
  const begin = await a.next((m) => !!m.snapshotBegin, 'a snapshot', timeoutMs, from);
  const start = a.received.indexOf(begin);
  const end = await a.next((m) => !!m.syncComplete, 'its sync complete', timeoutMs, start);
  return {
    begin,
    fabric: fabricUpserts(a, start).filter((_, i) => i < (end.syncComplete?.fabricCount ?? 0)),
    end,
  };
}

/** Has the agent ack OK every fabric object it is sent, now and later, until its stream ends. */
export function ackEveryFabricObject(a: RawAgent): RawAgent {
  ackEach(a, fabricAck);
  return a;
}
