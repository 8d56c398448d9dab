// Hears the kernel's nf_tables notifications in the host namespace and says when a transaction changed
// our policy table, so that drift (a rule flushed, an element deleted, by hand or by another tool) is
// put back within a second instead of at the next periodic recheck. Which of those transactions were
// our own is decided on the main thread (lib/nftables/own-transactions.ts).
//
// As the fabric's monitor (fabric/drift-monitor.ts): a worker thread with blocking reads, since a read
// on the threadpool would hold one of its few threads for as long as nothing happens. The worker
// follows transactions itself and posts one message per transaction that touched the table, not one
// per element: an apply of a thousand pods is thousands of notifications.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import {
  AF_NETLINK,
  SOCK_CLOEXEC,
  SOCK_RAW,
  closeFd,
  setsockoptInt,
  socket,
  SOL_NETLINK,
} from '../../../lib/libc';
import type { Netns } from '../../../lib/netns/netns-handle';
import {
  NETLINK_NETFILTER,
  NFNLGRP_NFTABLES,
  NFNL_SUBSYS_NFTABLES,
  NFT_MSG_GETGEN,
  TableTransactions,
} from '../../../lib/nftables/nft-notifications';
import { NLM_F_REQUEST, decodeMessages, encodeMessage } from '../../../lib/rtnetlink/message';
import { configureNetlinkFd } from '../../../lib/rtnetlink/socket';

const ROLE = 'workloadnet-policy-drift-monitor';
/** How long a blocking read waits before the thread looks whether it should stop. */
const READ_TIMEOUT_MS = 500;
/** Room for the notifications of a large apply (one per element) while the thread catches up. */
const RECEIVE_BUFFER_BYTES = 16 * 1024 * 1024;
const NETLINK_ADD_MEMBERSHIP = 1;

interface MonitorData {
  role: typeof ROLE;
  fd: number;
  table: string;
}

/** What the worker posts. */
export type PolicyTableEvent =
  /** A committed transaction changed the table (ours or not: the caller tells). */
  | { kind: 'changed' }
  /** The socket overflowed: notifications were lost, anything may have changed. */
  | { kind: 'lost' };

type Posted = PolicyTableEvent | { kind: 'error'; message: string };

/** A NETLINK_NETFILTER socket in `ns` (the process's own when absent) that hears every nf_tables commit. */
function listeningSocket(ns: Netns | undefined): number {
  const create = (): number => socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  const fd = ns ? ns.enter(create) : create();
  configureNetlinkFd(fd, { receiveTimeoutMs: READ_TIMEOUT_MS, receiveBufferBytes: RECEIVE_BUFFER_BYTES });
  try {
    // A socket that never sent has port id 0 and is skipped by broadcasts from writers that did not ask
    // for an echo (their exclude port id is 0 too): one GETGEN binds it. Its answer is a NEWGEN that
    // ends no transaction of ours, read and ignored by the worker.
    const payload = Buffer.alloc(4);
    const type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;
    fs.writeSync(fd, encodeMessage({ type, flags: NLM_F_REQUEST, seq: 1, pid: 0, payload }));
    setsockoptInt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES);
  } catch (err) {
    closeFd(fd);
    throw err;
  }
  return fd;
}

export class PolicyDriftMonitor {
  private stopping = false;
  private closed = false;

  private constructor(
    private readonly worker: Worker,
    private readonly fd: number,
  ) {}

  /**
   * Starts listening in `ns` for transactions that change `table` (family inet); `onDeath` hears once
   * of a monitor that ends other than by stop().
   */
  static start(
    ns: Netns | undefined,
    table: string,
    onEvent: (e: PolicyTableEvent) => void,
    onDeath: (why: string) => void,
  ): PolicyDriftMonitor {
    const fd = listeningSocket(ns);
    let worker: Worker;
    try {
      worker = new Worker(path.join(__dirname, 'policy-drift-monitor.js'), {
        workerData: { role: ROLE, fd, table } satisfies MonitorData,
      });
    } catch (err) {
      closeFd(fd);
      throw err;
    }
    worker.unref();
    const monitor = new PolicyDriftMonitor(worker, fd);
    let dead = false;
    const death = (why: string): void => {
      if (dead || monitor.stopping) return;
      dead = true;
      onDeath(why);
    };
    worker.on('message', (e: Posted) => {
      if (e.kind === 'error') death(e.message);
      else onEvent(e);
    });
    worker.on('error', (err) => death(`policy drift monitor thread failed: ${err.message}`));
    worker.on('exit', (code) => death(`policy drift monitor thread ended (exit code ${code})`));
    return monitor;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    // A blocking read is not interrupted by terminate(): the thread is at most one read timeout away.
    await this.worker.terminate();
    if (this.closed) return;
    this.closed = true;
    closeFd(this.fd);
  }
}

function listen(data: MonitorData): void {
  const port = parentPort;
  if (!port) return;
  const post = (e: Posted): void => port.postMessage(e);
  const transactions = new TableTransactions(data.table);
  const buf = Buffer.allocUnsafe(256 * 1024);
  for (;;) {
    let n: number;
    try {
      n = fs.readSync(data.fd, buf, 0, buf.length, null);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // EAGAIN: the read timeout passed with nothing to read. EINTR: a signal cut the read short.
      if (code === 'EAGAIN' || code === 'EINTR') continue;
      if (code === 'ENOBUFS') {
        transactions.reset();
        post({ kind: 'lost' });
        continue;
      }
      post({ kind: 'error', message: `policy drift monitor read failed: ${String(err)}` });
      return;
    }
    let ended: number;
    try {
      ended = transactions.read(decodeMessages(buf.subarray(0, n)));
    } catch {
      // A datagram we cannot read: as good as lost.
      transactions.reset();
      post({ kind: 'lost' });
      continue;
    }
    for (let i = 0; i < ended; i++) post({ kind: 'changed' });
  }
}

if (!isMainThread && (workerData as Partial<MonitorData> | null)?.role === ROLE)
  listen(workerData as MonitorData);
