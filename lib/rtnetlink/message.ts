// The netlink message header (struct nlmsghdr, 16 bytes) and the framing of several messages in one
// datagram. A datagram may carry many messages back to back, each aligned to 4 bytes; that is what
// lets us batch several requests into one write and what a multi-part dump reply looks like.

import { readU16, readU32, writeU16, writeU32 } from './attributes';

export const NLMSG_HDRLEN = 16;
export const NLMSG_ALIGNTO = 4;

// Control message types.
export const NLMSG_NOOP = 1;
export const NLMSG_ERROR = 2;
export const NLMSG_DONE = 3;
export const NLMSG_OVERRUN = 4;

// Flags on every request.
export const NLM_F_REQUEST = 0x01;
export const NLM_F_MULTI = 0x02;
export const NLM_F_ACK = 0x04;
export const NLM_F_ECHO = 0x08;
export const NLM_F_DUMP_INTR = 0x10;
export const NLM_F_DUMP_FILTERED = 0x20;
// Modifiers of GET requests.
export const NLM_F_ROOT = 0x100;
export const NLM_F_MATCH = 0x200;
export const NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH;
// Modifiers of NEW requests.
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
export const NLM_F_APPEND = 0x800;
// Flags on NLMSG_ERROR replies.
export const NLM_F_CAPPED = 0x100;
export const NLM_F_ACK_TLVS = 0x200;

export const nlmsgAlign = (len: number): number => (len + NLMSG_ALIGNTO - 1) & ~(NLMSG_ALIGNTO - 1);

export interface NetlinkMessage {
  type: number;
  flags: number;
  seq: number;
  pid: number;
  /** Everything after the 16-byte header (family header + attributes). */
  payload: Buffer;
}

/**
 * A request as built by the link/address/route modules. The socket adds NLM_F_REQUEST, NLM_F_ACK and
 * the sequence number, so builders cannot forget them.
 */
export interface NetlinkRequest {
  type: number;
  /** Type-specific flags (NLM_F_CREATE, NLM_F_EXCL, NLM_F_DUMP, NLM_F_ECHO, …). */
  flags: number;
  payload: Buffer;
}

export function encodeMessage(msg: NetlinkMessage): Buffer {
  const len = NLMSG_HDRLEN + msg.payload.length;
  const buf = Buffer.alloc(nlmsgAlign(len));
  writeHeader(buf, 0, len, msg);
  msg.payload.copy(buf, NLMSG_HDRLEN);
  return buf;
}

/** Several messages in one buffer, each padded to 4 bytes: one datagram, one write(). */
export function encodeMessages(msgs: readonly NetlinkMessage[]): Buffer {
  let size = 0;
  for (const m of msgs) size += nlmsgAlign(NLMSG_HDRLEN + m.payload.length);
  const buf = Buffer.alloc(size);
  let pos = 0;
  for (const m of msgs) {
    const len = NLMSG_HDRLEN + m.payload.length;
    writeHeader(buf, pos, len, m);
    m.payload.copy(buf, pos + NLMSG_HDRLEN);
    pos += nlmsgAlign(len);
  }
  return buf;
}

function writeHeader(buf: Buffer, offset: number, len: number, msg: NetlinkMessage): void {
  writeU32(buf, len, offset);
  writeU16(buf, msg.type, offset + 4);
  writeU16(buf, msg.flags, offset + 6);
  writeU32(buf, msg.seq, offset + 8);
  writeU32(buf, msg.pid, offset + 12);
}

/**
 * Splits one received datagram into messages. Payloads are views into `buf`. A length field that
 * points past the end means a truncated read, which we report rather than silently dropping replies.
 */
export function decodeMessages(buf: Buffer): NetlinkMessage[] {
  const out: NetlinkMessage[] = [];
  let pos = 0;
  while (pos + NLMSG_HDRLEN <= buf.length) {
    const len = readU32(buf, pos);
    if (len < NLMSG_HDRLEN || pos + len > buf.length) {
      throw new RangeError(
        `malformed netlink message at offset ${pos}: length ${len}, ${buf.length - pos} left`,
      );
    }
    out.push({
      type: readU16(buf, pos + 4),
      flags: readU16(buf, pos + 6),
      seq: readU32(buf, pos + 8),
      pid: readU32(buf, pos + 12),
      payload: buf.subarray(pos + NLMSG_HDRLEN, pos + len),
    });
    pos += nlmsgAlign(len);
  }
  return out;
}
