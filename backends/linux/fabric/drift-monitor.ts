// Hears the kernel's route, neighbour, address and link notifications in the host namespace and says when one of
// ours may have been removed or changed behind our back, so that the fabric converges again within a
// second instead of at the next periodic pass.
//
// The socket is read by a worker thread with blocking reads: a read on the threadpool would hold one
// of its few threads for as long as nothing happens (that is, almost always). The worker only decodes
// headers and posts a few numbers per notification; every decision is made on the main thread.
//
// A read interrupted by a signal (EINTR: a read with SO_RCVTIMEO is not restarted after SIGSTOP/SIGCONT,
// as a debugger, the cgroup freezer or `docker pause` send) is read again. Any other failure ends the
// thread and is reported; its keeper (restarting-reader.ts) starts a new monitor.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { closeFd } from '../../../lib/libc';
import type { Netns } from '../../../lib/netns/netns-handle';
import {
  AF_BRIDGE,
  RTM_DELADDR,
  RTM_DELLINK,
  RTM_DELNEIGH,
  RTM_DELROUTE,
  RTM_NEWLINK,
  RTM_NEWNEIGH,
  RTM_NEWROUTE,
  RTNLGRP_IPV4_IFADDR,
  RTNLGRP_IPV4_ROUTE,
  RTNLGRP_IPV6_IFADDR,
  RTNLGRP_IPV6_ROUTE,
  RTNLGRP_LINK,
  RTNLGRP_NEIGH,
  decodeAddress,
  decodeLink,
  decodeMessages,
  decodeNeighbour,
  decodeRoute,
  joinGroups,
  type NetlinkMessage,
} from '../../../lib/rtnetlink';
import { fdbId, neighbourId, routeId } from '../../../lib/overlay';
import { configureNetlinkFd, netlinkFdIn } from '../../../lib/rtnetlink/socket';

const ROLE = 'workloadnet-fabric-drift-monitor';
/** How long a blocking read waits before the thread looks whether it should stop. */
const READ_TIMEOUT_MS = 500;

interface MonitorData {
  role: typeof ROLE;
  fd: number;
}

/** Event type of "the socket overflowed, notifications were lost" (no RTM_* uses 0). */
export const KERNEL_EVENTS_LOST = 0;

/** What the worker posts per notification: enough to decide whether it concerns an object of ours. */
export interface KernelEvent {
  /** RTM_* (or KERNEL_EVENTS_LOST). */
  type: number;
  /** Route: rtm_protocol. */
  protocol?: number;
  /** Neighbour: ndm_ifindex; link: ifi_index. */
  ifindex?: number;
  /** The object as the fabric names it in its plan ("route|…", "neighbour|…", "fdb|…"). */
  id?: string;
  /** Neighbour: its address and MAC (the source filter follows the MACs of direct peers). */
  dst?: string;
  mac?: string;
}

/** The worker's reading of one notification. */
export function kernelEvent(msg: NetlinkMessage): KernelEvent | undefined {
  switch (msg.type) {
    case RTM_NEWROUTE:
    case RTM_DELROUTE: {
      const r = decodeRoute(msg);
      return { type: msg.type, protocol: r.protocol, id: routeId(r) };
    }
    case RTM_NEWNEIGH:
    case RTM_DELNEIGH: {
      const n = decodeNeighbour(msg);
      const id = n.family === AF_BRIDGE ? fdbId(n) : neighbourId(n);
      return { type: msg.type, ifindex: n.ifindex, id, dst: n.dst, mac: n.mac };
    }
    case RTM_NEWLINK:
    case RTM_DELLINK:
      return { type: msg.type, ifindex: decodeLink(msg).index };
    case RTM_DELADDR:
      return { type: msg.type, ifindex: decodeAddress(msg).index };
    default:
      return undefined;
  }
}

export class DriftMonitor {
  private stopping = false;
  private closed = false;

  private constructor(
    private readonly worker: Worker,
    private readonly fd: number,
  ) {}

  /**
   * Starts listening in `ns`; `onEvent` gets every route, neighbour and link notification, `onDeath`
   * hears once of a monitor that ends other than by stop().
   */
  static start(ns: Netns, onEvent: (e: KernelEvent) => void, onDeath: (why: string) => void): DriftMonitor {
    const fd = netlinkFdIn(ns);
    let worker: Worker;
    try {
      configureNetlinkFd(fd, { receiveTimeoutMs: READ_TIMEOUT_MS });
      joinGroups(fd, [
        RTNLGRP_LINK,
        RTNLGRP_NEIGH,
        RTNLGRP_IPV4_IFADDR,
        RTNLGRP_IPV6_IFADDR,
        RTNLGRP_IPV4_ROUTE,
        RTNLGRP_IPV6_ROUTE,
      ]);
      worker = new Worker(path.join(__dirname, 'drift-monitor.js'), {
        workerData: { role: ROLE, fd } satisfies MonitorData,
      });
    } catch (err) {
      closeFd(fd);
      throw err;
    }
    worker.unref();
    const monitor = new DriftMonitor(worker, fd);
    let dead = false;
    const death = (why: string): void => {
      if (dead || monitor.stopping) return;
      dead = true;
      onDeath(why);
    };
    worker.on('message', (e: KernelEvent | { kind: 'error'; message: string }) => {
      if ('kind' in e) death(e.message);
      else onEvent(e);
    });
    worker.on('error', (err) => death(`drift monitor thread failed: ${err.message}`));
    worker.on('exit', (code) => death(`drift monitor thread ended (exit code ${code})`));
    return monitor;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    // A blocking read is not interrupted by terminate(): the thread is at most one read timeout away
    // from noticing.
    await this.worker.terminate();
    if (this.closed) return;
    this.closed = true;
    closeFd(this.fd);
  }
}

function listen(data: MonitorData): void {
  const port = parentPort;
  if (!port) return;
  const buf = Buffer.allocUnsafe(256 * 1024);
  for (;;) {
    let n: number;
    try {
      n = fs.readSync(data.fd, buf, 0, buf.length, null);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // EAGAIN: the read timeout passed with nothing to read. EINTR: a signal cut the read short.
      if (code === 'EAGAIN' || code === 'EINTR') continue;
      // ENOBUFS: the kernel dropped notifications; only a full converge can tell what they said.
      if (code === 'ENOBUFS') {
        port.postMessage({ type: KERNEL_EVENTS_LOST } satisfies KernelEvent);
        continue;
      }
      port.postMessage({ kind: 'error', message: `drift monitor read failed: ${String(err)}` });
      return;
    }
    try {
      for (const msg of decodeMessages(buf.subarray(0, n))) {
        const e = kernelEvent(msg);
        if (e) port.postMessage(e);
      }
    } catch {
      // A datagram we cannot read: treat it as lost notifications.
      port.postMessage({ type: KERNEL_EVENTS_LOST } satisfies KernelEvent);
    }
  }
}

if (!isMainThread && (workerData as Partial<MonitorData> | null)?.role === ROLE)
  listen(workerData as MonitorData);
