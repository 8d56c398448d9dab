import type { AgentMessage, FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { RawAgent } from './raw-agent';

// A raw agent that behaves as a well-behaved DPU agent does about the fabric: it acknowledges every
// fabric object it is sent, in order, until its stream ends. Tests that play a second agent (a rogue,
// a holder of an address) need it to take part in the fabric without a simulator of its own.

/** Acks, with `ack`, every fabric object `a` receives from now on (checked every 20 ms). */
export function ackEveryFabricObject(a: RawAgent, ack: (o: FabricObject) => AgentMessage): void {
  let acked = 0;
  const t = setInterval(() => {
    if (a.isEnded) return clearInterval(t);
    for (; acked < a.received.length; acked++) {
      const o = a.received[acked]?.upsert?.fabric;
      if (o) a.send(ack(o));
    }
  }, 20);
}
