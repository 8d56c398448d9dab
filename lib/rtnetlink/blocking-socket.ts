// A NETLINK_ROUTE socket driven synchronously: write a batch, read until its last request is answered.
// Only for a thread that runs nothing but netlink exchanges (the Linux backend's netlink thread): the
// kernel does a request's work inside write(), so on the event loop this would stall every other call.
// On such a thread it is the cheapest way to talk to the kernel: no threadpool hop per write and per
// reply datagram (see docs/benchmarks.md, "Why the code is shaped this way").
//
// Same conventions as socket.ts: NLM_F_ACK on the last request of a batch only (the kernel reports
// every failure whether or not an ACK was asked for, so the last ACK confirms the earlier requests),
// replies matched by sequence number, SO_RCVTIMEO bounding every read.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { closeFd } from '../libc';
import type { Netns } from '../netns/netns-handle';
import { NetlinkError, decodeDoneMessage, decodeErrorMessage } from './errors';
import {
  NLM_F_ACK,
  NLM_F_REQUEST,
  NLMSG_DONE,
  NLMSG_ERROR,
  NLMSG_NOOP,
  NLMSG_OVERRUN,
  decodeMessages,
  encodeMessages,
  type NetlinkMessage,
  type NetlinkRequest,
} from './message';
import {
  configureNetlinkFd,
  isDump,
  netlinkFdIn,
  type BatchOutcome,
  type NetlinkSocketOptions,
} from './socket';

const ETIMEDOUT = 110;
const EMSGSIZE = 90;
const RECEIVE_SIZE = 64 * 1024;

export class BlockingNetlinkSocket {
  private seq: number = crypto.randomInt(1, 0x7fffffff);
  private closed = false;
  /** One receive buffer per socket: replies the caller keeps are copied out of it. */
  private readonly buf = Buffer.allocUnsafe(RECEIVE_SIZE);

  private constructor(
    readonly fd: number,
    readonly label: string,
  ) {}

  /** Takes over a NETLINK_ROUTE socket fd that is already configured (see configureNetlinkFd). */
  static fromFd(fd: number, label: string): BlockingNetlinkSocket {
    return new BlockingNetlinkSocket(fd, label);
  }

  /** A socket acting inside `ns` for its whole life; the calling thread enters `ns` for one socket(). */
  static openIn(ns: Netns, opts: NetlinkSocketOptions = {}): BlockingNetlinkSocket {
    const fd = netlinkFdIn(ns);
    configureNetlinkFd(fd, opts);
    return new BlockingNetlinkSocket(fd, opts.label ?? ns.path);
  }

  /**
   * Several requests in one write; blocks until the last one is answered. Each outcome is reported
   * separately (one failing does not stop the others, as the kernel handles them in order). Only a
   * dead socket or a missing answer (timeout) throws.
   */
  batch(reqs: readonly NetlinkRequest[]): BatchOutcome[] {
    if (this.closed)
      throw new NetlinkError(9, reqs[0]?.type ?? 0, { message: `socket ${this.label} is closed` });
    if (reqs.length === 0) return [];
    if (reqs.some(isDump)) throw new TypeError('dumps are not supported on a blocking socket');
    const first = this.nextSeq(reqs.length);
    const last = reqs.length - 1;
    const datagram = encodeMessages(
      reqs.map((req, i) => ({
        type: req.type,
        flags: req.flags | NLM_F_REQUEST | (i === last ? NLM_F_ACK : 0),
        seq: (first + i) >>> 0,
        pid: 0,
        payload: req.payload,
      })),
    );
    const written = this.io(() => fs.writeSync(this.fd, datagram), reqs[0]?.type ?? 0, 'netlink send');
    if (written !== datagram.length) {
      throw new NetlinkError(EMSGSIZE, reqs[0]?.type ?? 0, {
        message: `short write on ${this.label}: ${written} of ${datagram.length} bytes`,
      });
    }
    const outcomes: Array<BatchOutcome | undefined> = new Array(reqs.length);
    const replies: NetlinkMessage[][] = reqs.map(() => []);
    while (outcomes[last] === undefined) {
      const n = this.io(() => fs.readSync(this.fd, this.buf, 0, RECEIVE_SIZE, null), 0, 'netlink receive');
      if (n >= RECEIVE_SIZE) {
        throw new NetlinkError(EMSGSIZE, 0, { message: `reply larger than ${RECEIVE_SIZE} bytes` });
      }
      for (const msg of decodeMessages(this.buf.subarray(0, n))) {
        // Answers to an earlier batch that timed out, or to nobody, are dropped.
        const i = (msg.seq - first) >>> 0;
        if (i > last) continue;
        const type = reqs[i]?.type ?? 0;
        switch (msg.type) {
          case NLMSG_NOOP:
            break;
          case NLMSG_ERROR:
          case NLMSG_DONE: {
            const ack = msg.type === NLMSG_ERROR ? decodeErrorMessage(msg) : decodeDoneMessage(msg);
            outcomes[i] =
              ack.errno === 0
                ? { ok: true, replies: replies[i] ?? [] }
                : { ok: false, error: new NetlinkError(ack.errno, type, ack.extack) };
            break;
          }
          case NLMSG_OVERRUN:
            outcomes[i] = {
              ok: false,
              error: new NetlinkError(EMSGSIZE, type, { message: 'NLMSG_OVERRUN' }),
            };
            break;
          default:
            // The buffer is read into again: keep a copy.
            replies[i]?.push({ ...msg, payload: Buffer.from(msg.payload) });
        }
      }
    }
    // Answered without an error before the last ACK: succeeded (see the header).
    return Array.from(outcomes, (o, i) => o ?? { ok: true, replies: replies[i] ?? [] });
  }

  /** One request; returns its non-ACK replies (e.g. the NLM_F_ECHO copy), throws its NetlinkError. */
  request(req: NetlinkRequest): NetlinkMessage[] {
    const [outcome] = this.batch([req]);
    if (!outcome) throw new Error('netlink batch returned no outcome');
    if (!outcome.ok) throw outcome.error;
    return outcome.replies;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeFd(this.fd);
  }

  /** Reserves `count` consecutive sequence numbers (mod 2^32) and returns the first. */
  private nextSeq(count: number): number {
    const first = this.seq;
    this.seq = (this.seq + count) >>> 0 || 1;
    return first;
  }

  /** A failed read or write as a NetlinkError (a read past SO_RCVTIMEO is ETIMEDOUT). */
  private io(fn: () => number, type: number, what: string): number {
    try {
      return fn();
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      const errno = e.code === 'EAGAIN' ? ETIMEDOUT : -(e.errno ?? -5);
      throw new NetlinkError(errno, type, { message: `${what} on ${this.label}: ${e.message}` }, what);
    }
  }
}
