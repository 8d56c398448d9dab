// The requests a socket has sent and not yet seen answered, keyed by sequence number, and how a reply
// settles them. Its own file because this is where the batch's one-ACK rule lives: a request sent
// without NLM_F_ACK is settled by a later request of its datagram being answered, never by a reply of
// its own. The socket (socket.ts) only writes, reads and hands each datagram it read to dispatch().

import { NetlinkError, decodeDoneMessage, decodeErrorMessage } from './errors';
import {
  NLM_F_DUMP_INTR,
  NLMSG_DONE,
  NLMSG_ERROR,
  NLMSG_NOOP,
  NLMSG_OVERRUN,
  decodeMessages,
  type NetlinkMessage,
} from './message';

const EMSGSIZE = 90;

/** What a settled request resolves with: its non-ACK replies, and whether a dump was interrupted. */
export interface RequestReplies {
  replies: NetlinkMessage[];
  interrupted: boolean;
}

/** A datagram's requests, in order. */
export interface Batch {
  seqs: readonly number[];
  /**
   * Every request sent without NLM_F_ACK before this position has been settled: settle() starts
   * there, so that answering the n requests of a batch one by one costs n steps, not n²/2 (a batch of
   * 5,000 routes would hold the event loop for a second).
   */
  settledBelow: number;
}

export interface Pending {
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
  resolve(v: RequestReplies): void;
  reject(err: Error): void;
}

export class PendingRequests {
  private readonly bySeq = new Map<number, Pending>();
  private written = 0;
  private drained: (() => void) | undefined;

  get size(): number {
    return this.bySeq.size;
  }

  /** Requests written to the kernel and not yet answered: while there are any, a read is due. */
  get writtenUnanswered(): number {
    return this.written;
  }

  add(seq: number, p: Pending): void {
    this.bySeq.set(seq, p);
  }

  /** Marks `seqs` as written (those not settled meanwhile). */
  markWritten(seqs: readonly number[]): void {
    for (const seq of seqs) {
      const p = this.bySeq.get(seq);
      // Another request's read may already have picked up and settled this one.
      if (p && !p.written) {
        p.written = true;
        this.written++;
      }
    }
  }

  /** Resolves once nothing is pending (at once when nothing is). */
  whenDrained(): Promise<void> {
    if (this.bySeq.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => (this.drained = resolve));
  }

  dispatch(datagram: Buffer): void {
    for (const msg of decodeMessages(datagram)) {
      const p = this.bySeq.get(msg.seq);
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

  settle(seq: number, error?: Error): void {
    const p = this.bySeq.get(seq);
    if (!p) return;
    // The kernel handles a datagram's requests in order and always reports an error, ACK flag or
    // not. So when a request is answered, every earlier request of its batch that was sent without
    // NLM_F_ACK and has not reported an error has succeeded.
    const from = p.batch.settledBelow;
    if (p.position > from) {
      p.batch.settledBelow = p.position;
      for (let i = from; i < p.position; i++) {
        const earlierSeq = p.batch.seqs[i] ?? 0;
        const earlier = this.bySeq.get(earlierSeq);
        if (earlier?.implicitAck) this.settle(earlierSeq);
      }
    }
    this.bySeq.delete(seq);
    if (p.written) this.written--;
    if (error) p.reject(error);
    else p.resolve({ replies: p.replies, interrupted: p.interrupted });
    if (this.bySeq.size === 0 && this.drained) {
      const drained = this.drained;
      this.drained = undefined;
      drained();
    }
  }

  /** Fails every request already written (a read failed: their replies cannot be trusted to come). */
  failWritten(error: Error): void {
    for (const [seq, p] of [...this.bySeq]) if (p.written) this.settle(seq, error);
  }
}
