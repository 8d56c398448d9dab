// An attach's exchange with the kernel when the netlink thread cannot run it: the same four writes,
// each through the libuv threadpool. Its own file because it is the fallback path (thread off or gone,
// or the host link's name taken, which needs the leftover check and its explanation) and the backend
// only chooses between the two paths.

import type { AttachSpec, DataplaneResult } from '../../core/backend';
import type { Logger } from '../../core/logger';
import { setLinkRequest } from '../../lib/rtnetlink/link';
import { NetlinkSocket } from '../../lib/rtnetlink/socket';
import { workloadSideRequests } from '../interface/workload-side';
import { step, stepDescription } from './attach-errors';
import type { AttachPlan } from './attach-plan';
import { hostSideRequests } from './host-side';
import { createVethPair, rollbackVethPair, type VethPair } from './veth-pair';

/** The same exchange as the netlink thread's, each request through the libuv threadpool. */
export async function attachOnThreadpool(
  host: NetlinkSocket,
  spec: AttachSpec,
  plan: AttachPlan,
  planned: DataplaneResult,
  logger: Logger,
): Promise<DataplaneResult> {
  const workload = NetlinkSocket.openIn(spec.netns);
  try {
    const pair = await step(spec.key, stepDescription('veth', plan, spec.netnsPath), () =>
      createVethPair({ host, workload, workloadNs: spec.netns, logger }, plan, planned.mac),
    );
    try {
      await configureBothSides(host, workload, plan, pair, spec.netnsPath);
      // Last, so that a link with its alias is a complete attachment (see reconcile).
      await step(spec.key, stepDescription('alias', plan, spec.netnsPath), () =>
        host.request(setLinkRequest({ index: pair.hostIndex }, { alias: plan.alias })),
      );
    } catch (err) {
      await rollbackVethPair(host, plan, pair, logger);
      throw err;
    }
    return planned;
  } finally {
    // Closing never waits (see NetlinkSocket.close); the namespace is the core's to close.
    void workload.close();
  }
}

/**
 * One write each side, the host side first: its end must go without a link-local address before the
 * workload end's up gives it a carrier (link-local.ts). A failure of the workload side is reported
 * first, as the netlink thread does.
 */
async function configureBothSides(
  host: NetlinkSocket,
  workload: NetlinkSocket,
  plan: AttachPlan,
  pair: VethPair,
  netnsPath: string,
): Promise<void> {
  const hostFailure = await step(plan.key, stepDescription('host', plan, netnsPath), () =>
    host.batchOrThrow(hostSideRequests(plan, pair.hostIndex)),
  ).then(
    () => undefined,
    (err: unknown) => ({ err }),
  );
  await step(plan.key, stepDescription('workload', plan, netnsPath), () =>
    workload.batchOrThrow(workloadSideRequests(plan, pair.peerIndex)),
  );
  if (hostFailure) throw hostFailure.err;
}
