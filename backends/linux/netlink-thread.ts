// One dedicated worker thread that runs the whole netlink exchange of an attach synchronously (see
// attach-exchange.ts): the main thread posts one message per attach and gets one back. On the
// threadpool path every write and every reply datagram is a hop through libuv (the veth create alone
// is three), and the event loop runs the continuations in between; here the exchange runs
// back to back on a thread that does nothing else, and the event loop only sees the two messages
// (measured in docs/benchmarks.md, "Why the code is shaped this way").
//
// A thread that runs only our code may setns freely: this one enters each workload's namespace for the
// one socket() it needs there. It uses the namespace fd the core opened and checked (fds are shared
// by all threads), only while the attach that lent it waits for the answer. Its host socket is opened and closed by the
// main thread, so that nothing leaks whatever happens to the thread.

import * as path from 'node:path';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { WorkloadNetError, knownWorkloadNetError, type ErrorCode } from '../../core/errors';
import { closeFd, setThreadNice } from '../../lib/libc';
import type { Netns } from '../../lib/netns/netns-handle';
import { attachExchange, type AttachExchangeResult, type AttachJob } from './attach-exchange';
import { BlockingNetlinkSocket } from '../../lib/rtnetlink/blocking-socket';
import { NetlinkError, type ExtendedAck } from '../../lib/rtnetlink/errors';
import { configureNetlinkFd, netlinkFdIn } from '../../lib/rtnetlink/socket';

/** Marks the worker as ours, so that loading this file in some other worker starts nothing. */
const ROLE = 'workloadnet-linux-netlink-thread';

interface ThreadData {
  role: typeof ROLE;
  hostFd: number;
  hostLabel: string;
}

/** An error as it crosses the thread boundary (structured clone keeps neither class nor fields). */
type WireError =
  | { kind: 'netlink'; errno: number; requestType: number; extack: ExtendedAck; message: string }
  | { kind: 'workloadnet'; code: ErrorCode; message: string; retryable: boolean }
  | { kind: 'error'; message: string };

type WireResult = Omit<AttachExchangeResult, 'error'> & { error?: WireError };

type Request = { kind: 'attach'; id: number; job: AttachJob } | { kind: 'stop' };

type Reply = { kind: 'ready' } | { kind: 'done'; id: number; result: WireResult };

function toWire(err: unknown): WireError {
  if (err instanceof NetlinkError)
    return {
      kind: 'netlink',
      errno: err.errno,
      requestType: err.requestType,
      extack: err.extack,
      message: err.message,
    };
  const known = knownWorkloadNetError(err);
  if (known)
    return { kind: 'workloadnet', code: known.code, message: known.message, retryable: known.retryable };
  return { kind: 'error', message: err instanceof Error ? err.message : String(err) };
}

function fromWire(w: WireError): Error {
  switch (w.kind) {
    case 'netlink': {
      const err = new NetlinkError(w.errno, w.requestType, w.extack);
      err.message = w.message;
      return err;
    }
    case 'workloadnet':
      return new WorkloadNetError(w.code, w.message, w.retryable);
    default:
      return new Error(w.message);
  }
}

export class NetlinkThread {
  private readonly waiting = new Map<number, (r: AttachExchangeResult) => void>();
  private nextId = 1;
  private stopped: Error | undefined;
  private exited: Promise<void>;

  private constructor(
    private readonly worker: Worker,
    private readonly hostFd: number,
    onDeath: ((why: string) => void) | undefined,
  ) {
    this.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
    worker.on('message', (reply: Reply) => {
      if (reply.kind !== 'done') return;
      const settle = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (this.waiting.size === 0) worker.unref();
      const { error, ...rest } = reply.result;
      settle?.({ ...rest, error: error && fromWire(error) } as AttachExchangeResult);
    });
    const fail = (why: string): void => {
      if (!this.stopped) {
        this.stopped = new WorkloadNetError('UNAVAILABLE', `linux backend: the netlink thread ${why}`, true);
        onDeath?.(this.stopped.message);
      }
      for (const settle of this.waiting.values())
        settle({ ok: false, step: 'veth', error: this.stopped, times: NO_TIMES });
      this.waiting.clear();
    };
    worker.on('error', (err) => fail(`failed: ${err.message}`));
    worker.on('exit', (code) => fail(`stopped (exit code ${code})`));
  }

  /**
   * Starts the thread with a socket of its own in the host namespace; resolves once it serves. A thread
   * that cannot start rejects here, and the backend keeps the threadpool path. `onDeath` hears of a
   * thread that ends other than by stop().
   */
  static async start(hostNs: Netns, onDeath?: (why: string) => void): Promise<NetlinkThread> {
    const hostFd = netlinkFdIn(hostNs);
    configureNetlinkFd(hostFd);
    let worker: Worker;
    try {
      worker = new Worker(path.join(__dirname, 'netlink-thread.js'), {
        workerData: { role: ROLE, hostFd, hostLabel: hostNs.path } satisfies ThreadData,
      });
    } catch (err) {
      closeFd(hostFd);
      throw err;
    }
    try {
      await new Promise<void>((resolve, reject) => {
        worker.once('message', (r: Reply) =>
          r.kind === 'ready' ? resolve() : reject(new Error('unexpected first message')),
        );
        worker.once('error', reject);
        worker.once('exit', (code) => reject(new Error(`exited with code ${code} while starting`)));
      });
    } catch (err) {
      await worker.terminate();
      closeFd(hostFd);
      throw err;
    }
    worker.unref();
    return new NetlinkThread(worker, hostFd, onDeath);
  }

  /** False once the thread has died: the backend then uses the threadpool path. */
  get alive(): boolean {
    return this.stopped === undefined;
  }

  /** Runs one attach's exchange on the thread. Never rejects: failures are in the result. */
  attach(job: AttachJob): Promise<AttachExchangeResult> {
    if (this.stopped)
      return Promise.resolve({ ok: false, step: 'veth', error: this.stopped, times: NO_TIMES });
    const id = this.nextId++;
    return new Promise((resolve) => {
      // Referenced only while an attach is in flight, so that an idle thread never keeps a process alive.
      if (this.waiting.size === 0) this.worker.ref();
      this.waiting.set(id, resolve);
      this.worker.postMessage({ kind: 'attach', id, job } satisfies Request);
    });
  }

  /**
   * Stops the thread once the attaches already posted are done (a stuck one is cut off after
   * STOP_GRACE_MS), then closes its host socket.
   */
  async stop(): Promise<void> {
    const wasAlive = this.alive;
    this.stopped ??= new WorkloadNetError('UNAVAILABLE', 'linux backend is stopping', true);
    if (wasAlive) {
      this.worker.ref();
      this.worker.postMessage({ kind: 'stop' } satisfies Request);
      const timer = setTimeout(() => void this.worker.terminate(), STOP_GRACE_MS);
      await this.exited;
      clearTimeout(timer);
    } else await this.exited;
    closeFd(this.hostFd);
  }
}

/** Nice value of the thread, relative to none: below the event loop under contention, not starved. */
const THREAD_NICE = 5;

/** Longer than any one exchange can take: each read gives up after SO_RCVTIMEO (10 s). */
const STOP_GRACE_MS = 15_000;

const NO_TIMES = { socket: 0, veth: 0, workload: 0, host: 0, alias: 0 };

/** The thread's side: one attach per message, answered as soon as it is done. */
function serve(data: ThreadData): void {
  const port = parentPort;
  if (!port) return;
  const host = BlockingNetlinkSocket.fromFd(data.hostFd, data.hostLabel);
  try {
    // Under a burst this thread runs back to back; the main thread answers Status meanwhile. On a
    // machine with few CPUs the scheduler gives that event loop precedence this way.
    setThreadNice(THREAD_NICE);
  } catch {
    // Only ever a small loss: the thread keeps the daemon's priority.
  }
  port.on('message', (req: Request) => {
    if (req.kind === 'stop') {
      // Nothing else keeps this thread alive: it ends, and the main thread closes the host socket.
      port.close();
      return;
    }
    const { id, job } = req;
    const r = attachExchange(host, job);
    const result: WireResult = r.ok ? r : { ...r, error: toWire(r.error) };
    port.postMessage({ kind: 'done', id, result } satisfies Reply);
  });
  port.postMessage({ kind: 'ready' } satisfies Reply);
}

if (!isMainThread && (workerData as Partial<ThreadData> | null)?.role === ROLE)
  serve(workerData as ThreadData);
