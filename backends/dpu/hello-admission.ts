import { status } from '@grpc/grpc-js';
import type { Hello } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentPeer } from './agent-server';

// Whether an agent's hello opens a session. Checked in order: protocol version, well-formed ids, the
// TLS certificate vouching for the id, no other live session of the same agent, and room for one more
// agent. A node may carry several DPUs, each with a session of its own.

export const PROTOCOL_VERSION = 1;
const MAX_ID_LENGTH = 253;
const ID_PATTERN = /^[\x21-\x7e]+$/;

/** What the daemon knows about the session that currently holds this agent id's slot. */
export interface CurrentSession {
  id: string;
  agentId: string;
  peerAddress: string;
  connectedAt: number;
  healthy: boolean;
}

export type Admission =
  | { ok: true; /** A silent session this hello takes over from; the caller closes it. */ replaces?: string }
  | { ok: false; code: status; reason: string };

/**
 * `current` is the session holding the same agent id, if any; `others` the number of other agents
 * holding a slot, against `maxAgents`.
 */
export function admitHello(
  hello: Hello,
  peer: AgentPeer,
  current: CurrentSession | undefined,
  others = 0,
  maxAgents = Number.POSITIVE_INFINITY,
): Admission {
  if (hello.protocolVersion !== PROTOCOL_VERSION) {
    return {
      ok: false,
      code: status.FAILED_PRECONDITION,
      reason: `protocol version ${hello.protocolVersion} is not supported; this daemon speaks version ${PROTOCOL_VERSION}`,
    };
  }
  for (const [what, v] of [
    ['agent_id', hello.agentId],
    ['boot_id', hello.bootId],
  ] as const) {
    if (!v || v.length > MAX_ID_LENGTH || !ID_PATTERN.test(v)) {
      return {
        ok: false,
        code: status.INVALID_ARGUMENT,
        reason: `hello ${what} must be 1-${MAX_ID_LENGTH} printable characters without spaces, got ${JSON.stringify(v.slice(0, 64))}`,
      };
    }
  }
  if (peer.transport === 'tls' && !peer.certificateNames.includes(hello.agentId)) {
    return {
      ok: false,
      code: status.PERMISSION_DENIED,
      reason: `agent id ${hello.agentId} does not match the client certificate (names: ${peer.certificateNames.join(', ') || 'none'})`,
    };
  }
  if (!current) {
    if (others >= maxAgents) {
      return {
        ok: false,
        code: status.RESOURCE_EXHAUSTED,
        reason: `this daemon already serves ${others} DPU agents, its limit; agent ${hello.agentId} is refused`,
      };
    }
    return { ok: true };
  }
  // A session that went silent but was not reaped yet is half-dead: the agent talking now is the
  // better source of truth.
  if (!current.healthy) return { ok: true, replaces: current.id };
  const since = new Date(current.connectedAt).toISOString();
  return {
    ok: false,
    code: status.ALREADY_EXISTS,
    reason: `agent ${hello.agentId} is already connected (session ${current.id} from ${current.peerAddress} since ${since}); a second agent with the same id is refused`,
  };
}
