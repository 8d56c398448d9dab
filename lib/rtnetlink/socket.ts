// A NETLINK_ROUTE socket bound to one network namespace (the one it was created in), shared by any
// number of concurrent requests.
//
// Why the I/O looks like this:
// - All reads and writes go through fs.read/fs.write on the raw fd, i.e. on the libuv threadpool.
//   The kernel does the work of a request inside write() (a veth delete takes ~20 ms there), so a
//   synchronous send on the main thread would stall the event loop for that long.
// - Replies are dispatched by sequence number (pending-requests.ts), so concurrent requests on one
//   socket never receive each other's ACKs. A request sent alone, and the last request of a batch,
//   carry NLM_F_ACK, so each write ends with exactly one NLMSG_ERROR (error 0 = ACK) or, for a dump,
//   NLMSG_DONE. The earlier requests of a batch do not ask for an ACK (each ACK is a datagram, i.e.
//   one more threadpool read): the kernel handles them in order and reports any failure whether or
//   not an ACK was asked for, so the final ACK confirms them. `ackEveryRequest` restores one ACK per
//   request.
// - A read is only started while some request has been written and not yet answered. The kernel
//   queues a request's replies before write() returns (and the next part of a dump before read()
//   returns), so such a read never waits long and never parks a threadpool thread indefinitely.
//   SO_RCVTIMEO bounds it anyway, in case replies were dropped.
//   (Taking the queued replies with a non-blocking recv on the event loop instead saves a threadpool
//   round trip, but under a burst of attaches it let one callback run hundreds of continuations at
//   once and Status waited behind them; one datagram per callback keeps the loop fair. See
//   docs/benchmarks.md, "Why the code is shaped this way".)

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import {
  AF_NETLINK,
  NETLINK_CAP_ACK,
  NETLINK_EXT_ACK,
  NETLINK_ROUTE,
  SO_RCVBUF,
  SO_RCVBUFFORCE,
  SO_RCVTIMEO,
  SOCK_CLOEXEC,
  SOCK_RAW,
  SOL_NETLINK,
  SOL_SOCKET,
  closeFd,
  setsockopt,
  setsockoptInt,
  socket,
} from '../libc';
import { NetnsStateError } from '../netns/netns-error';
import type { Netns } from '../netns/netns-handle';
import { splitByBytes } from './batch-datagrams';
import { NetlinkError, NetlinkSocketError } from './errors';
import {
  NLM_F_ACK,
  NLM_F_DUMP,
  NLM_F_REQUEST,
  encodeMessages,
  type NetlinkMessage,
  type NetlinkRequest,
} from './message';
import { PendingRequests, type Batch, type RequestReplies } from './pending-requests';

const ETIMEDOUT = 110;
const EMSGSIZE = 90;
const EBADF = 9;

/** Large enough for any rtnetlink datagram: dump parts are at most ~32 KiB. */
const RECEIVE_SIZE = 64 * 1024;
const DUMP_ATTEMPTS = 5;
/**
 * Receive buffers shared by all sockets: a short-lived socket per attach would otherwise allocate
 * 64 KiB each time and keep the garbage collector busy. At most one read per socket is in flight,
 * and reads run on the threadpool, so a handful of buffers is enough.
 */
const receiveBuffers: Buffer[] = [];
const MAX_SPARE_BUFFERS = 16;

export interface NetlinkSocketOptions {
  /** How long one read may wait for the kernel before the waiting requests fail. Default 10 s. */
  receiveTimeoutMs?: number;
  /** SO_RCVBUF(FORCE) size; room for many concurrent replies. Default 4 MiB. */
  receiveBufferBytes?: number;
  /** Shown in error messages (e.g. the namespace path). */
  label?: string;
  /**
   * Put NLM_F_ACK on every request of a batch, not only on the last one. Off by default: each ACK is
   * a datagram of its own, i.e. one more threadpool read, while errors come back either way.
   */
  ackEveryRequest?: boolean;
}

/** The result of one request in a batch. */
export type BatchOutcome = { ok: true; replies: NetlinkMessage[] } | { ok: false; error: NetlinkError };

export class NetlinkSocket {
  readonly label: string;
  private readonly pending = new PendingRequests();
  private seq: number = crypto.randomInt(1, 0x7fffffff);
  private reading = false;
  private readonly ackEveryRequest: boolean;
  private dumpChain: Promise<unknown> = Promise.resolve();
  private closing: Promise<void> | undefined;

  private constructor(
    readonly fd: number,
    label: string,
    ackEveryRequest: boolean,
  ) {
    this.label = label;
    this.ackEveryRequest = ackEveryRequest;
  }

  /**
   * Takes ownership of a NETLINK_ROUTE socket fd (created in whichever namespace it should act in)
   * and configures it. On failure the fd is closed.
   */
  static fromFd(fd: number, opts: NetlinkSocketOptions = {}): NetlinkSocket {
    configureNetlinkFd(fd, opts);
    return new NetlinkSocket(fd, opts.label ?? `netlink fd ${fd}`, opts.ackEveryRequest ?? false);
  }

  /** A socket in the calling thread's current network namespace. */
  static open(opts: NetlinkSocketOptions = {}): NetlinkSocket {
    return NetlinkSocket.fromFd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), opts);
  }

  /** A socket that acts inside `ns` for its whole life (created there: ~12 µs of setns window). */
  static openIn(ns: Netns, opts: NetlinkSocketOptions = {}): NetlinkSocket {
    return NetlinkSocket.fromFd(netlinkFdIn(ns), { label: ns.path, ...opts });
  }

  get closed(): boolean {
    return this.closing !== undefined;
  }

  /** One request; resolves with its non-ACK replies (e.g. the NLM_F_ECHO copy), rejects with NetlinkError. */
  async request(req: NetlinkRequest): Promise<NetlinkMessage[]> {
    if (isDump(req)) return this.dump(req);
    const [outcome] = await this.batch([req]);
    if (!outcome) throw new Error('netlink batch returned no outcome');
    if (!outcome.ok) throw outcome.error;
    return outcome.replies;
  }

  /**
   * Several requests in one datagram (one write), or in as many as their size needs, each sent once
   * the one before is answered. The kernel processes them in order; one failing does not stop the
   * others, so each outcome is reported separately, with its errno and extack.
   */
  async batch(reqs: readonly NetlinkRequest[]): Promise<BatchOutcome[]> {
    if (reqs.some(isDump)) throw new TypeError('dumps cannot be batched; use dump()');
    const datagrams = splitByBytes(reqs);
    if (datagrams.length === 1) return this.batchOne(reqs);
    const out: BatchOutcome[] = [];
    for (const d of datagrams) out.push(...(await this.batchOne(d)));
    return out;
  }

  private batchOne(reqs: readonly NetlinkRequest[]): Promise<BatchOutcome[]> {
    const promises = this.send(reqs, false);
    return Promise.all(
      promises.map((p) =>
        p.then(
          (r): BatchOutcome => ({ ok: true, replies: r.replies }),
          (error: unknown): BatchOutcome => {
            if (error instanceof NetlinkError) return { ok: false, error };
            throw error;
          },
        ),
      ),
    );
  }

  /** Like batch(), but throws the first failure (after every request has been answered). */
  async batchOrThrow(reqs: readonly NetlinkRequest[]): Promise<NetlinkMessage[][]> {
    const outcomes = await this.batch(reqs);
    const failed = outcomes.find((o) => !o.ok);
    if (failed && !failed.ok) throw failed.error;
    return outcomes.map((o) => (o.ok ? o.replies : []));
  }

  /**
   * A dump: all parts until NLMSG_DONE. The kernel runs one dump per socket at a time (a second one
   * fails with EBUSY), so dumps on this socket are queued. A dump interrupted by a concurrent change
   * (NLM_F_DUMP_INTR) is repeated, since its parts may be inconsistent.
   */
  dump(req: NetlinkRequest): Promise<NetlinkMessage[]> {
    const run = async (): Promise<NetlinkMessage[]> => {
      const dumpReq = { ...req, flags: req.flags | NLM_F_DUMP };
      for (let attempt = 1; ; attempt++) {
        const [p] = this.send([dumpReq], true);
        if (!p) throw new Error('netlink send returned no promise');
        const { replies, interrupted } = await p;
        if (!interrupted || attempt >= DUMP_ATTEMPTS) return replies;
      }
    };
    const result = this.dumpChain.then(run, run);
    this.dumpChain = result.catch(() => undefined);
    return result;
  }

  /** Closes the fd once every outstanding request has been answered; new requests are refused. */
  close(): Promise<void> {
    if (!this.closing) {
      this.closing = (async () => {
        if (this.pending.size > 0) await this.pending.whenDrained();
        // Releasing a netlink socket that subscribes to no multicast group never waits, and a
        // threadpool round trip costs more than the close itself.
        closeFd(this.fd);
      })();
    }
    return this.closing;
  }

  // ---- internals ----

  private nextSeq(): number {
    this.seq = (this.seq + 1) >>> 0 || 1;
    return this.seq;
  }

  private send(reqs: readonly NetlinkRequest[], dump: boolean): Array<Promise<RequestReplies>> {
    if (this.closing) {
      const err = new NetlinkError(EBADF, reqs[0]?.type ?? 0, { message: `socket ${this.label} is closed` });
      return reqs.map(() => Promise.reject(err));
    }
    const seqs = reqs.map(() => this.nextSeq());
    const batch: Batch = { seqs, settledBelow: 0 };
    const implicit = (i: number): boolean => !this.ackEveryRequest && i < reqs.length - 1;
    const promises = reqs.map((req, position) => {
      const seq = seqs[position] ?? 0;
      return new Promise<RequestReplies>((resolve, reject) => {
        this.pending.add(seq, {
          type: req.type,
          dump,
          implicitAck: implicit(position),
          batch,
          position,
          written: false,
          interrupted: false,
          replies: [],
          resolve,
          reject,
        });
      });
    });
    const datagram = encodeMessages(
      reqs.map((req, i) => ({
        type: req.type,
        flags: req.flags | NLM_F_REQUEST | (implicit(i) ? 0 : NLM_F_ACK),
        seq: seqs[i] ?? 0,
        pid: 0,
        payload: req.payload,
      })),
    );
    fs.write(this.fd, datagram, 0, datagram.length, null, (err, written) => {
      if (err || written !== datagram.length) {
        const error =
          err ?? new Error(`short netlink write on ${this.label}: ${written} of ${datagram.length} bytes`);
        for (const seq of seqs) this.pending.settle(seq, error);
        return;
      }
      this.pending.markWritten(seqs);
      this.pump();
    });
    return promises;
  }

  private pump(): void {
    if (this.reading || this.pending.writtenUnanswered === 0) return;
    this.reading = true;
    const buf = receiveBuffers.pop() ?? Buffer.allocUnsafe(RECEIVE_SIZE);
    fs.read(this.fd, buf, 0, RECEIVE_SIZE, null, (err, n) => {
      this.reading = false;
      if (err) {
        const errno = (err as NodeJS.ErrnoException).code === 'EAGAIN' ? ETIMEDOUT : -(err.errno ?? -5);
        this.pending.failWritten(
          new NetlinkError(
            errno,
            0,
            { message: `no usable reply on ${this.label}: ${err.message}` },
            'netlink receive',
          ),
        );
      } else if (n >= RECEIVE_SIZE) {
        this.pending.failWritten(
          new NetlinkError(
            EMSGSIZE,
            0,
            { message: `reply larger than ${RECEIVE_SIZE} bytes` },
            'netlink receive',
          ),
        );
      } else {
        try {
          this.pending.dispatch(buf.subarray(0, n));
        } catch (e) {
          this.pending.failWritten(e instanceof Error ? e : new Error(String(e)));
        }
      }
      // dispatch() copied what it keeps, so the buffer can serve the next read of any socket.
      if (receiveBuffers.length < MAX_SPARE_BUFFERS) receiveBuffers.push(buf);
      this.pump();
    });
  }
}

/**
 * Sets the options every NETLINK_ROUTE socket of ours has (see NetlinkSocketOptions); on failure the fd
 * is closed.
 */
export function configureNetlinkFd(fd: number, opts: NetlinkSocketOptions = {}): void {
  try {
    // Errors carry the kernel's message; ACKs do not echo the whole request back.
    setsockoptInt(fd, SOL_NETLINK, NETLINK_EXT_ACK, 1);
    setsockoptInt(fd, SOL_NETLINK, NETLINK_CAP_ACK, 1);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, timeval(opts.receiveTimeoutMs ?? 10_000));
    const rcvbuf = opts.receiveBufferBytes ?? 4 * 1024 * 1024;
    try {
      setsockoptInt(fd, SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf);
    } catch {
      // Without CAP_NET_ADMIN only the capped SO_RCVBUF works; a smaller buffer is still correct.
      setsockoptInt(fd, SOL_SOCKET, SO_RCVBUF, rcvbuf);
    }
  } catch (err) {
    closeFd(fd);
    throw err;
  }
}

/**
 * A NETLINK_ROUTE socket fd created inside `ns` (~12 µs of setns window on the calling thread), not yet
 * configured. A refused setns becomes a NetlinkSocketError that says what is missing.
 */
export function netlinkFdIn(ns: Netns): number {
  try {
    return ns.enter(() => socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  } catch (err) {
    if (err instanceof NetnsStateError) throw err;
    if ((err as { code?: string }).code === 'EPERM') {
      throw new NetlinkSocketError(
        'permission',
        `not allowed to enter network namespace ${ns.path} (needs root or CAP_SYS_ADMIN)`,
      );
    }
    throw new NetlinkSocketError('failed', `cannot open a netlink socket in ${ns.path}: ${String(err)}`);
  }
}

/**
 * NLM_F_DUMP shares its bits with NLM_F_REPLACE | NLM_F_EXCL, so, as in the kernel, it only means
 * "dump" on a GET request (rtnetlink message types with low bits 2: RTM_GETLINK, RTM_GETADDR, …).
 */
export function isDump(req: NetlinkRequest): boolean {
  return (req.type & 3) === 2 && (req.flags & NLM_F_DUMP) !== 0;
}

function timeval(ms: number): Buffer {
  const b = Buffer.alloc(16);
  const sec = BigInt(Math.floor(ms / 1000));
  const usec = BigInt((ms % 1000) * 1000);
  if (os.endianness() === 'LE') {
    b.writeBigInt64LE(sec, 0);
    b.writeBigInt64LE(usec, 8);
  } else {
    b.writeBigInt64BE(sec, 0);
    b.writeBigInt64BE(usec, 8);
  }
  return b;
}
