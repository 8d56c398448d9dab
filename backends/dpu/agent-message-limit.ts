import { status } from '@grpc/grpc-js';

// gRPC enforces the agent message limit (agent-server.ts) as soon as a message's length prefix says it
// is over, before reading it, and ends the call itself: the session only sees the call cancelled, and
// on its own would say "the agent cancelled the stream" of a message the daemon refused. What gRPC
// sent is still on the call's HTTP/2 stream (its trailers, or headers for a trailers-only answer): this
// reads it back, so the session can say what happened and how large the message was.
//
// The stream is not part of grpc-js's typed API: every step is checked, and anything unexpected (another
// grpc-js version) reads as "nothing known", which leaves the session's generic reason.

/**
 * Two agent messages list a whole table: an inventory (every VF) and, from version 3, a PeerStatus
 * (every FabricPeer, resent after each change and every heartbeat). A 5,000-peer table makes a
 * PeerStatus of some 300 KB, so a limit below that ends the stream each time the agent reports its
 * peers, and with it every ack counted on it. 4 MiB (gRPC's usual default) holds some 60,000 peers;
 * anything larger is a broken or hostile agent.
 */
export const MAX_AGENT_MESSAGE_BYTES = 4 * 1024 * 1024;

export interface RefusedMessage {
  /** The message's size and the limit, as gRPC's message says them. */
  bytes: number;
  limit: number;
  /** gRPC's own words. */
  details: string;
}

type Headers = Record<string, unknown>;

function field(o: unknown, key: string): unknown {
  return typeof o === 'object' && o !== null ? (o as Record<string, unknown>)[key] : undefined;
}

/** What gRPC sent when it ended `call` for a message over the limit; undefined for any other end. */
export function refusedMessage(call: unknown): RefusedMessage | undefined {
  const stream = field(field(call, 'call'), 'stream');
  const sent = (field(stream, 'sentTrailers') ?? field(stream, 'sentHeaders')) as Headers | undefined;
  if (Number(field(sent, 'grpc-status')) !== status.RESOURCE_EXHAUSTED) return undefined;
  const raw = field(sent, 'grpc-message');
  let details = typeof raw === 'string' ? raw : '';
  try {
    details = decodeURIComponent(details);
  } catch {
    // Left as sent.
  }
  // grpc-js: "Received message larger than max (5242904 vs 4194304)".
  const m = /larger than max \((\d+) vs\.? (\d+)\)/.exec(details);
  if (!m) return undefined;
  return { bytes: Number(m[1]), limit: Number(m[2]), details };
}
