// A NETLINK_ROUTE socket bound to one network namespace (the one it was created in), shared by any
// number of concurrent requests.
//
// Why the I/O looks like this:
// - All reads and writes go through fs.read/fs.write on the raw fd, i.e. on the libuv threadpool.
//   The kernel does the work of a request inside write() (a veth delete takes ~20 ms there), so a
//   synchronous send on the main thread would stall the event loop for that long.
// - Replies are dispatched by sequence number, so concurrent requests on one socket never receive each
//   other's ACKs. A request sent alone, and the last request of a batch, carry NLM_F_ACK, so each
//   write ends with exactly one NLMSG_ERROR (error 0 = ACK) or, for a dump, NLMSG_DONE. The earlier
//   requests of a batch do not ask for an ACK (each ACK is a datagram, i.e. one more threadpool read):
//   the kernel handles them in order and reports any failure whether or not an ACK was asked for, so
//   the final ACK confirms them. `ackEveryRequest` restores one ACK per request.
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
import { NetlinkError, NetlinkSocketError, decodeDoneMessage, decodeErrorMessage } from './errors';
import {
  NLM_F_ACK,
  NLM_F_DUMP,
  NLM_F_DUMP_INTR,
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

const ETIMEDOUT = 110;
const EMSGSIZE = 90;
const EBADF = 9;

/** Large enough for any rtnetlink datagram: dump parts are at most ~32 KiB. */
const RECEIVE_SIZE = 64 * 1024;
/**
 * The most one write carries. The kernel refuses a datagram larger than the socket's send buffer
 * (net.core.wmem_default, 212,992 bytes unless raised) with EMSGSIZE: 5,000 routes in one batch
 * (the host port's at 5,000 peers) failed whole. 64 KiB, some 1,000 requests, keeps well inside it.
 */
const MAX_DATAGRAM_BYTES = 64 * 1024;
/** A request's room in a datagram: its header and its payload, padded to 4 bytes. */
const NLMSG_HDRLEN = 16;
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

/** A datagram's requests, in order. */
interface Batch {
  seqs: readonly number[];
  /**
   * Every request sent without NLM_F_ACK before this position has been settled: settle() starts
   * there, so that answering the n requests of a batch one by one costs n steps, not n²/2 (5,000
   * routes in one batch took a second of the event loop).
   */
  settledBelow: number;
}

interface Pending {
  type: number;
  dump: boolean;
  /** Sent without NLM_F_ACK: succeeded once a later request of its batch is answered without an error for it. */
  implicitAck: boolean;
  /** The whole batch, and this request's position in it. */
  batch: Batch;
  position: number;
  written: boolean;
  interrupted: boolean;
  replies: NetlinkMessage[];
  resolve(v: { replies: NetlinkMessage[]; interrupted: boolean }): void;
  reject(err: Error): void;
}

export class NetlinkSocket {
  readonly label: string;
  private readonly pending = new Map<number, Pending>();
  private seq: number = crypto.randomInt(1, 0x7fffffff);
  private reading = false;
  private readonly ackEveryRequest: boolean;
  private writtenUnanswered = 0;
  private dumpChain: Promise<unknown> = Promise.resolve();
  private closing: Promise<void> | undefined;
  private drained: (() => void) | undefined;

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
        if (this.pending.size > 0) await new Promise<void>((resolve) => (this.drained = resolve));
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

  private send(
    reqs: readonly NetlinkRequest[],
    dump: boolean,
  ): Array<Promise<{ replies: NetlinkMessage[]; interrupted: boolean }>> {
    if (this.closing) {
      const err = new NetlinkError(EBADF, reqs[0]?.type ?? 0, { message: `socket ${this.label} is closed` });
      return reqs.map(() => Promise.reject(err));
    }
    const seqs = reqs.map(() => this.nextSeq());
    const batch: Batch = { seqs, settledBelow: 0 };
    const implicit = (i: number): boolean => !this.ackEveryRequest && i < reqs.length - 1;
    const promises = reqs.map((req, position) => {
      const seq = seqs[position] ?? 0;
      return new Promise<{ replies: NetlinkMessage[]; interrupted: boolean }>((resolve, reject) => {
        this.pending.set(seq, {
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
        for (const seq of seqs) this.settle(seq, error);
        return;
      }
      for (const seq of seqs) {
        const p = this.pending.get(seq);
        // Another request's read may already have picked up and settled this one.
        if (p && !p.written) {
          p.written = true;
          this.writtenUnanswered++;
        }
      }
      this.pump();
    });
    return promises;
  }

  private pump(): void {
    if (this.reading || this.writtenUnanswered === 0) return;
    this.reading = true;
    const buf = receiveBuffers.pop() ?? Buffer.allocUnsafe(RECEIVE_SIZE);
    fs.read(this.fd, buf, 0, RECEIVE_SIZE, null, (err, n) => {
      this.reading = false;
      if (err) {
        const errno = (err as NodeJS.ErrnoException).code === 'EAGAIN' ? ETIMEDOUT : -(err.errno ?? -5);
        this.failWritten(
          new NetlinkError(
            errno,
            0,
            { message: `no usable reply on ${this.label}: ${err.message}` },
            'netlink receive',
          ),
        );
      } else if (n >= RECEIVE_SIZE) {
        this.failWritten(
          new NetlinkError(
            EMSGSIZE,
            0,
            { message: `reply larger than ${RECEIVE_SIZE} bytes` },
            'netlink receive',
          ),
        );
      } else {
        try {
          this.dispatch(buf.subarray(0, n));
        } catch (e) {
          this.failWritten(e instanceof Error ? e : new Error(String(e)));
        }
      }
      // dispatch() copied what it keeps, so the buffer can serve the next read of any socket.
      if (receiveBuffers.length < MAX_SPARE_BUFFERS) receiveBuffers.push(buf);
      this.pump();
    });
  }

  private dispatch(datagram: Buffer): void {
    for (const msg of decodeMessages(datagram)) {
      const p = this.pending.get(msg.seq);
      // Replies to requests that already failed (timeout) or to nobody are dropped.
      if (!p) continue;
      switch (msg.type) {
        case NLMSG_NOOP:
          break;
        case NLMSG_ERROR: {
          const ack = decodeErrorMessage(msg);
          if (ack.errno === 0) this.settle(msg.seq);
          else this.settle(msg.seq, new NetlinkError(ack.errno, p.type, ack.extack));
          break;
        }
        case NLMSG_DONE: {
          const done = decodeDoneMessage(msg);
          if (done.errno === 0) this.settle(msg.seq);
          else this.settle(msg.seq, new NetlinkError(done.errno, p.type, done.extack));
          break;
        }
        case NLMSG_OVERRUN:
          this.settle(msg.seq, new NetlinkError(EMSGSIZE, p.type, { message: 'NLMSG_OVERRUN' }));
          break;
        default:
          if (msg.flags & NLM_F_DUMP_INTR) p.interrupted = true;
          // The receive buffer is reused by the next read: keep a copy.
          p.replies.push({ ...msg, payload: Buffer.from(msg.payload) });
      }
    }
  }

  private settle(seq: number, error?: Error): void {
    const p = this.pending.get(seq);
    if (!p) return;
    // The kernel handles a datagram's requests in order and always reports an error, ACK flag or
    // not. So when a request is answered, every earlier request of its batch that was sent without
    // NLM_F_ACK and has not reported an error has succeeded.
    const from = p.batch.settledBelow;
    if (p.position > from) {
      p.batch.settledBelow = p.position;
      for (let i = from; i < p.position; i++) {
        const earlierSeq = p.batch.seqs[i] ?? 0;
        const earlier = this.pending.get(earlierSeq);
        if (earlier?.implicitAck) this.settle(earlierSeq);
      }
    }
    this.pending.delete(seq);
    if (p.written) this.writtenUnanswered--;
    if (error) p.reject(error);
    else p.resolve({ replies: p.replies, interrupted: p.interrupted });
    if (this.pending.size === 0 && this.drained) {
      const drained = this.drained;
      this.drained = undefined;
      drained();
    }
  }

  private failWritten(error: Error): void {
    for (const [seq, p] of [...this.pending]) if (p.written) this.settle(seq, error);
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

/** `reqs` cut, in order, into runs that each fit one datagram (a request larger than that goes alone). */
function splitByBytes(reqs: readonly NetlinkRequest[]): Array<readonly NetlinkRequest[]> {
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
