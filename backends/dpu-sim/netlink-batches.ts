import type { NetlinkMessage, NetlinkRequest, NetlinkSocket } from '../../lib/rtnetlink';

// Many rtnetlink requests sent a few hundred to a datagram, each with its own result. The socket's
// batch() asks for an ACK on a datagram's last request only; the kernel answers every request that
// fails with its own error whether or not it asked, so one failing request is reported as itself and
// the others of its datagram as done. At 5,000 peers a snapshot is ~15,000 requests: a write and an
// ACK read through the threadpool for each would be most of what it costs the simulator.

/**
 * Requests per datagram: ~100 bytes each, well within what one write to a netlink socket may carry,
 * and the kernel's time for one write stays a few milliseconds.
 */
export const BATCH_REQUESTS = 256;

/** One request's result: its replies, or why it failed. */
export type RequestOutcome = { ok: true; replies: NetlinkMessage[] } | { ok: false; error: Error };

/**
 * Sends `reqs` BATCH_REQUESTS to a datagram, one datagram after the other (their order holds:
 * removals sent before additions happen before them); one result per request. A datagram that could
 * not be sent or answered fails each of its requests with that error.
 */
export async function sendInBatches(
  sock: NetlinkSocket,
  reqs: readonly NetlinkRequest[],
): Promise<RequestOutcome[]> {
  const out: RequestOutcome[] = [];
  for (let i = 0; i < reqs.length; i += BATCH_REQUESTS) {
    const chunk = reqs.slice(i, i + BATCH_REQUESTS);
    try {
      out.push(...(await sock.batch(chunk)));
    } catch (err) {
      const error = err instanceof Error ? err : new Error(String(err));
      out.push(...chunk.map((): RequestOutcome => ({ ok: false, error })));
    }
  }
  return out;
}
