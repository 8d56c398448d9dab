import { status } from '@grpc/grpc-js';
import type { Hello } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentPeer } from './agent-server';

// Whether an agent's hello opens a session. Checked in order: protocol version, well-formed ids, the
// TLS certificate vouching for the id, no other live session of the same agent, and room for one more
// agent. A node may carry several DPUs, each with a session of its own.

/** The newest protocol version this daemon speaks. */
export const PROTOCOL_VERSION = 4;
/** The oldest it still speaks. */
export const MIN_PROTOCOL_VERSION = 1;
/** What the daemon tells agents it does (HelloAccept.capabilities.features). */
export const DAEMON_FEATURES = [
  'inventory',
  'qos',
  'pf-select',
  'keep-unlisted',
  'fabric',
  'peer-status-delta',
  'network-policy',
];
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
  | {
      ok: true;
      /** The version the session speaks. */
      version: number;
      /** A silent session this hello takes over from; the caller closes it. */
      replaces?: string;
    }
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
  const version = negotiateVersion(hello);
  if (typeof version === 'string') return { ok: false, code: status.FAILED_PRECONDITION, reason: version };
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
    return { ok: true, version };
  }
  // A session that went silent but was not reaped yet is half-dead: the agent talking now is the
  // better source of truth.
  if (!current.healthy) return { ok: true, version, replaces: current.id };
  const since = new Date(current.connectedAt).toISOString();
  return {
    ok: false,
    code: status.ALREADY_EXISTS,
    reason: `agent ${hello.agentId} is already connected (session ${current.id} from ${current.peerAddress} since ${since}); a second agent with the same id is refused`,
  };
}

/**
 * The highest version both sides speak, or why there is none. An agent offers a range
 * (min_protocol_version..max_protocol_version) or, as version 1 agents do, a single protocol_version.
 */
export function negotiateVersion(hello: Hello): number | string {
  const ours = `this daemon speaks versions ${MIN_PROTOCOL_VERSION}-${PROTOCOL_VERSION}`;
  const ranged = hello.maxProtocolVersion > 0;
  const min = ranged ? hello.minProtocolVersion || 1 : hello.protocolVersion;
  const max = ranged ? hello.maxProtocolVersion : hello.protocolVersion;
  if (ranged && min > max)
    return `protocol versions ${min}-${max} are an empty range (min_protocol_version above max_protocol_version); ${ours}`;
  const picked = Math.min(max, PROTOCOL_VERSION);
  if (picked < Math.max(min, MIN_PROTOCOL_VERSION) || picked < 1) {
    const offered = ranged ? `versions ${min}-${max} are` : `version ${max} is`;
    return `protocol ${offered} not supported; ${ours}`;
  }
  return picked;
}
