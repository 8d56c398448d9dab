import { LogRate } from '../../lib/log-rate';
import type { Logger } from '../../core/logger';
import { AckCode, type Ack, type Endpoint } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentSession } from './agent-session';
import type { DesiredPort } from './desired-state';

// Which endpoint an ack at a port's current generation leaves recorded. Detach and re-plumbing act on
// the recorded endpoint, so an agent re-acking a plumbed port as, say, `eth0` must not become the
// daemon's word for it: the endpoint stays what the daemon plumbed for as long as the DPU keeps the
// boot that created it. A DPU that rebooted (a new boot id) re-created its VFs and may name them anew;
// that endpoint is moved in only through the same guards as at Attach (endpoint-replumb.ts). Within one
// boot, an ack that names no endpoint, or a negative one, keeps the one recorded.

export type AckedEndpoint = { endpoint?: Endpoint; bootId: string } | 'refused';

export class AckEndpoints {
  private readonly logRate = new LogRate();
  /** Acks refused for naming another endpoint than the one plumbed. */
  refused = 0;

  constructor(private readonly log: Logger) {}

  /** The endpoint the ack leaves recorded, or 'refused' (reported) when it names another one. */
  of(s: AgentSession, entry: DesiredPort, ack: Ack): AckedEndpoint {
    const recorded = entry.ack?.endpoint?.netdev ? entry.ack : undefined;
    const offered = ack.endpoint?.netdev ? ack.endpoint : undefined;
    if (!recorded?.endpoint) return { endpoint: offered, bootId: s.bootId };
    // Another boot's endpoint went with that boot: what this boot acks OK (a netdev, or none for an
    // agent without host endpoints) is the port's endpoint now.
    if (ack.code === AckCode.ACK_CODE_OK && recorded.bootId !== undefined && recorded.bootId !== s.bootId)
      return { endpoint: offered, bootId: s.bootId };
    if (!offered || ack.code !== AckCode.ACK_CODE_OK || sameEndpoint(recorded.endpoint, offered))
      return { endpoint: recorded.endpoint, bootId: recorded.bootId ?? s.bootId };
    this.refused += 1;
    const n = this.logRate.occurrence('endpoint-change');
    if (n !== undefined) {
      this.log.error(
        {
          agentId: s.agentId,
          port: ack.name,
          generation: ack.generation,
          endpoint: recorded.endpoint.netdev,
          offered: offered.netdev.slice(0, 64),
          occurrences: n,
        },
        'refused an ack naming another endpoint for a port already plumbed; the port keeps its endpoint',
      );
    }
    return 'refused';
  }
}

/**
 * Whether an ack names the endpoint already recorded: the same netdev, and the same MAC and VF where
 * both say.
 */
function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  if (a.netdev !== b.netdev) return false;
  if (a.mac && b.mac && a.mac.toLowerCase() !== b.mac.toLowerCase()) return false;
  if (a.pfIndex !== undefined && b.pfIndex !== undefined && a.pfIndex !== b.pfIndex) return false;
  return a.vfIndex === undefined || b.vfIndex === undefined || a.vfIndex === b.vfIndex;
}
