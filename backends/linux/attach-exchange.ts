// The whole netlink exchange of an attach, synchronously, as the netlink thread runs it: a socket in
// the workload's namespace, the pair (echo + ACK), the host side, the workload side, the alias. The
// same requests, in the same writes and the same order as the threadpool path in linux-backend.ts
// (their builders are shared: veth-pair.ts, workload-side.ts, host-side.ts); only how they are sent
// differs. Rollback is not done here: a failure after the pair exists reports the pair, and the
// backend deletes it on the threadpool (a delete holds write() ~20 ms, which would stall every attach
// queued behind it on this thread).

import { NetnsHandle } from '../../lib/netns/netns-handle';
import type { AttachPlan } from './attach-plan';
import { hostSideRequests } from './host-side';
import { BlockingNetlinkSocket } from '../../lib/rtnetlink/blocking-socket';
import { decodeLink, getLinkRequest, setLinkRequest } from '../../lib/rtnetlink/link';
import type { BatchOutcome } from '../../lib/rtnetlink/socket';
import { vethPairFromEcho, vethPairRequest, type VethPair } from './veth-pair';
import { workloadSideRequests } from '../interface/workload-side';

export interface AttachJob {
  plan: AttachPlan;
  /** MAC of the workload end (chosen by plan()). */
  mac: string;
  /** fd of the workload's namespace, open in this process (fds are shared by all threads). */
  netnsFd: number;
  /** Its path, for messages, and its inode. */
  netnsPath: string;
  netnsInode: number;
}

/** Which part of the exchange failed: it names the step in the error the caller sees. */
export type AttachStep = 'socket' | 'veth' | 'workload' | 'host' | 'alias';

/** Time spent in each part, µs (for the per-step benchmark). */
export type AttachStepTimes = Record<AttachStep, number>;

/**
 * When the thread began the exchange, in µs on the monotonic clock that every thread of the process
 * shares (`process.hrtime`): with the moment the job was posted, it tells the hop to the thread from
 * the one back (for the per-step benchmark). Absent when the exchange never began (the thread was gone).
 */
interface ExchangeStart {
  startedAtUs?: number;
}

export type AttachExchangeResult = ExchangeStart &
  (
    | { ok: true; pair: VethPair; times: AttachStepTimes }
    | {
        ok: false;
        step: AttachStep;
        error: unknown;
        /** Set when the pair exists: the caller deletes it. */
        pair?: VethPair;
        times: AttachStepTimes;
      }
  );

export function attachExchange(host: BlockingNetlinkSocket, job: AttachJob): AttachExchangeResult {
  const { plan } = job;
  const times: AttachStepTimes = { socket: 0, veth: 0, workload: 0, host: 0, alias: 0 };
  let t = process.hrtime.bigint();
  const startedAtUs = Number(t / 1000n);
  const lap = (step: AttachStep): void => {
    const now = process.hrtime.bigint();
    times[step] = Number(now - t) / 1000;
    t = now;
  };
  let workload: BlockingNetlinkSocket;
  try {
    // The caller's handle stays open until we answer; this thread only enters it for one socket().
    const ns = NetnsHandle.borrow(job.netnsPath, job.netnsFd, job.netnsInode);
    workload = BlockingNetlinkSocket.openIn(ns, { label: job.netnsPath });
  } catch (error) {
    lap('socket');
    return { ok: false, step: 'socket', error, times, startedAtUs };
  }
  lap('socket');
  let pair: VethPair | undefined;
  let step: AttachStep = 'veth';
  try {
    const created = vethPairFromEcho(host.request(vethPairRequest(plan, job.mac, job.netnsFd)));
    // Kernels before 6.3 do not echo RTM_NEWLINK; then each end is asked for by name.
    const hostIndex = created.hostIndex ?? linkIndex(host, plan.hostName);
    const peerIndex = created.peerIndex ?? linkIndex(workload, plan.ifName);
    pair = { hostIndex, peerIndex };
    lap(step);
    // The host side first: its end must go without a link-local address before the workload end's
    // up gives it a carrier (link-local.ts). A failure of the workload side is reported first.
    step = 'host';
    const h = firstFailure(host.batch(hostSideRequests(plan, hostIndex)));
    lap(step);
    step = 'workload';
    const w = firstFailure(workload.batch(workloadSideRequests(plan, peerIndex)));
    lap(step);
    if (w) return { ok: false, step: 'workload', error: w, pair, times, startedAtUs };
    if (h) return { ok: false, step: 'host', error: h, pair, times, startedAtUs };
    // Last, so that a link with its alias is a complete attachment (see LinuxBackend.reconcile).
    step = 'alias';
    host.request(setLinkRequest({ index: hostIndex }, { alias: plan.alias }));
    lap(step);
    return { ok: true, pair, times, startedAtUs };
  } catch (error) {
    lap(step);
    return { ok: false, step, error, pair, times, startedAtUs };
  } finally {
    workload.close();
  }
}

function linkIndex(sock: BlockingNetlinkSocket, name: string): number {
  const [reply] = sock.request(getLinkRequest({ name }));
  if (!reply) throw new Error(`interface ${name} vanished right after it was created`);
  return decodeLink(reply).index;
}

function firstFailure(outcomes: readonly BatchOutcome[]): Error | undefined {
  for (const o of outcomes) if (!o.ok) return o.error;
  return undefined;
}
