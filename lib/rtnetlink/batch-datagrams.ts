// Cutting a batch of requests into datagrams the kernel accepts. Its own file because the limit is the
// socket's send buffer, a kernel setting, not anything of how replies are matched: the socket writes
// each run this returns as one datagram.

import type { NetlinkRequest } from './message';

/**
 * The most one write carries. The kernel refuses a datagram larger than the socket's send buffer
 * (net.core.wmem_default, 212,992 bytes unless raised) with EMSGSIZE, so one batch of 5,000 routes
 * (the host port's at 5,000 peers) would fail whole. 64 KiB, some 1,000 requests, keeps well inside it.
 */
const MAX_DATAGRAM_BYTES = 64 * 1024;
/** A request's room in a datagram: its header and its payload, padded to 4 bytes. */
const NLMSG_HDRLEN = 16;

/** `reqs` cut, in order, into runs that each fit one datagram (a request larger than that goes alone). */
export function splitByBytes(reqs: readonly NetlinkRequest[]): Array<readonly NetlinkRequest[]> {
  const out: NetlinkRequest[][] = [];
  let run: NetlinkRequest[] = [];
  let bytes = 0;
  for (const req of reqs) {
    const size = NLMSG_HDRLEN + ((req.payload.length + 3) & ~3);
    if (run.length > 0 && bytes + size > MAX_DATAGRAM_BYTES) {
      out.push(run);
      run = [];
      bytes = 0;
    }
    run.push(req);
    bytes += size;
  }
  out.push(run);
  return out;
}
