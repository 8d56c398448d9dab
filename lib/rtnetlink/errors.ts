// Kernel errors as values callers can test. Every request carries NLM_F_ACK and the socket enables
// NETLINK_EXT_ACK, so a failure comes back as NLMSG_ERROR with a negative errno and, usually, the
// kernel's own explanation ("ipv4: Address already assigned"). We keep both: callers branch on
// `code` ('EEXIST', 'ENODEV', …), people read `message`.

import { errnoDescription, errnoName } from '../errno';
import { decodeAttributes, getString, getU32, readS32, readU16, readU32 } from './attributes';
import { NLM_F_ACK_TLVS, NLM_F_CAPPED, NLMSG_HDRLEN, nlmsgAlign, type NetlinkMessage } from './message';

// Attributes of the extended ACK (enum nlmsgerr_attrs).
export const NLMSGERR_ATTR_MSG = 1;
export const NLMSGERR_ATTR_OFFS = 2;
export const NLMSGERR_ATTR_COOKIE = 3;
export const NLMSGERR_ATTR_POLICY = 4;
export const NLMSGERR_ATTR_MISS_TYPE = 5;
export const NLMSGERR_ATTR_MISS_NEST = 6;

export { errnoDescription, errnoName };

/** What the kernel said beyond the errno. */
export interface ExtendedAck {
  /** The kernel's message (NLMSGERR_ATTR_MSG). */
  message?: string;
  /** Byte offset in the request of the attribute that caused the error (NLMSGERR_ATTR_OFFS). */
  offset?: number;
  /** Attribute type the kernel said was missing (NLMSGERR_ATTR_MISS_TYPE). */
  missingType?: number;
}

export class NetlinkError extends Error {
  /** Positive errno (17 for EEXIST). */
  readonly errno: number;
  /** Symbolic errno ('EEXIST'), the field to branch on. */
  readonly code: string;
  /** The kernel's extended-ack message, when it sent one. */
  readonly extack: ExtendedAck;
  /** The request type that failed (RTM_NEWLINK, …), 0 when not tied to one request. */
  readonly requestType: number;

  constructor(errno: number, requestType: number, extack: ExtendedAck = {}, context?: string) {
    const code = errnoName(errno);
    const desc = errnoDescription(errno);
    const what = context ?? (requestType ? messageTypeName(requestType) : 'netlink request');
    super(`${what} failed: ${code}${desc ? ` (${desc})` : ''}${extack.message ? `: ${extack.message}` : ''}`);
    this.name = 'NetlinkError';
    this.errno = errno;
    this.code = code;
    this.extack = extack;
    this.requestType = requestType;
  }

  /**
   * The object the request named does not exist (any more): a link (ENODEV), a route (ESRCH, or
   * ENOENT from some families), an address (EADDRNOTAVAIL). The one test for "already gone".
   */
  get notFound(): boolean {
    return NOT_FOUND_CODES.has(this.code);
  }
}

/**
 * A netlink socket that could not be made inside a namespace: entering it was refused (`permission`:
 * the process lacks root or CAP_SYS_ADMIN), or the socket call failed (`failed`). Not a kernel answer
 * to a request, so not a NetlinkError.
 */
export class NetlinkSocketError extends Error {
  constructor(
    readonly reason: 'permission' | 'failed',
    message: string,
  ) {
    super(message);
    this.name = 'NetlinkSocketError';
  }
}

const NOT_FOUND_CODES: ReadonlySet<string> = new Set(['ENODEV', 'ESRCH', 'ENOENT', 'EADDRNOTAVAIL']);

/** `err` is a NetlinkError saying the object is gone (see NetlinkError.notFound). */
export function isNetlinkNotFound(err: unknown): boolean {
  return err instanceof NetlinkError && err.notFound;
}

const TYPE_NAMES: Record<number, string> = {
  16: 'RTM_NEWLINK',
  17: 'RTM_DELLINK',
  18: 'RTM_GETLINK',
  19: 'RTM_SETLINK',
  20: 'RTM_NEWADDR',
  21: 'RTM_DELADDR',
  22: 'RTM_GETADDR',
  24: 'RTM_NEWROUTE',
  25: 'RTM_DELROUTE',
  26: 'RTM_GETROUTE',
  28: 'RTM_NEWNEIGH',
  29: 'RTM_DELNEIGH',
  30: 'RTM_GETNEIGH',
};

export function messageTypeName(type: number): string {
  return TYPE_NAMES[type] ?? `netlink message type ${type}`;
}

/** The decoded body of an NLMSG_ERROR (error 0 is an ACK) or NLMSG_DONE. */
export interface AckPayload {
  /** Positive errno, 0 for success. */
  errno: number;
  /** Type of the request this acknowledges (NLMSG_ERROR only; 0 for NLMSG_DONE). */
  requestType: number;
  extack: ExtendedAck;
}

/**
 * Decodes NLMSG_ERROR: struct nlmsgerr {int error; struct nlmsghdr msg;}, then the original payload
 * unless NLM_F_CAPPED, then extended-ack attributes if NLM_F_ACK_TLVS.
 */
export function decodeErrorMessage(msg: NetlinkMessage): AckPayload {
  const p = msg.payload;
  if (p.length < 4) throw new RangeError('truncated NLMSG_ERROR');
  const errno = -readS32(p, 0);
  let requestType = 0;
  let tlvStart = p.length;
  if (p.length >= 4 + NLMSG_HDRLEN) {
    const origLen = readU32(p, 4);
    requestType = readU16(p, 8);
    tlvStart = msg.flags & NLM_F_CAPPED ? 4 + NLMSG_HDRLEN : nlmsgAlign(4 + origLen);
  }
  const extack = msg.flags & NLM_F_ACK_TLVS ? decodeExtack(p.subarray(Math.min(tlvStart, p.length))) : {};
  return { errno, requestType, extack };
}

/** Decodes NLMSG_DONE: an int (0 or a negative errno for a failed dump), then optional ext-ack TLVs. */
export function decodeDoneMessage(msg: NetlinkMessage): AckPayload {
  const p = msg.payload;
  const errno = p.length >= 4 ? -readS32(p, 0) : 0;
  const extack = msg.flags & NLM_F_ACK_TLVS && p.length > 4 ? decodeExtack(p.subarray(4)) : {};
  return { errno, requestType: 0, extack };
}

export function decodeExtack(buf: Buffer): ExtendedAck {
  const out: ExtendedAck = {};
  for (const a of decodeAttributes(buf)) {
    if (a.type === NLMSGERR_ATTR_MSG) out.message = getString(a.value);
    else if (a.type === NLMSGERR_ATTR_OFFS && a.value.length >= 4) out.offset = getU32(a.value);
    else if (a.type === NLMSGERR_ATTR_MISS_TYPE && a.value.length >= 4) out.missingType = getU32(a.value);
  }
  return out;
}
