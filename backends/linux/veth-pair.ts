// Creating the veth pair: one RTM_NEWLINK in the host namespace whose peer is born inside the
// workload namespace, already under its final name, with its MTU and MAC. Nothing ever appears under
// a temporary name, so a crash leaves at most a host link we can recognise (group + name) and delete.

import { alreadyExists } from '../../core/errors';
import type { AttachPlan } from './attach-plan';
import type { Logger } from '../../core/logger';
import type { Netns } from '../../lib/netns/netns-handle';
import { NetlinkError } from '../../lib/rtnetlink/errors';
import { RTM_NEWLINK, decodeLink, delLinkRequest, getLink, type Link } from '../../lib/rtnetlink/link';
import type { NetlinkMessage, NetlinkRequest } from '../../lib/rtnetlink/message';
import type { NetlinkSocket } from '../../lib/rtnetlink/socket';
import { newVethRequest } from '../../lib/rtnetlink/veth';

export interface VethPair {
  /** ifindex of the host end, in the host namespace. */
  hostIndex: number;
  /** ifindex of the workload end, in the workload namespace. */
  peerIndex: number;
}

export interface VethPairContext {
  host: NetlinkSocket;
  workload: NetlinkSocket;
  workloadNs: Netns;
  logger: Logger;
}

/**
 * The one request that creates the pair. Its echo carries the host ifindex and, in IFLA_LINK, the
 * peer's: no GETLINK needed (see vethPairFromEcho).
 */
export function vethPairRequest(plan: AttachPlan, peerMac: string, workloadNsFd: number): NetlinkRequest {
  return newVethRequest(
    {
      name: plan.hostName,
      mtu: plan.mtu,
      group: plan.linkGroup,
      // The host end can be brought up in the same request; the peer cannot (see VethSpec.up).
      up: true,
      // One queue each, as the kernel would end up with anyway, but without its two RCU waits.
      queues: 1,
      peer: { name: plan.ifName, mtu: plan.mtu, mac: peerMac, netnsFd: workloadNsFd },
    },
    { echo: true },
  );
}

/**
 * The pair's ifindexes from the replies to vethPairRequest, as far as the echo tells them: `peerIndex`
 * is undefined when the kernel did not echo (before 6.3) or the echo lacks the peer's index; the
 * caller then asks the workload namespace for its interface by name.
 */
export function vethPairFromEcho(replies: readonly NetlinkMessage[]): Partial<VethPair> {
  const echoed = replies.find((m) => m.type === RTM_NEWLINK);
  if (!echoed) return {};
  const link = decodeLink(echoed);
  const peerIndex = link.linkIndex === link.index ? undefined : link.linkIndex;
  return { hostIndex: link.index, peerIndex };
}

export async function createVethPair(
  ctx: VethPairContext,
  plan: AttachPlan,
  peerMac: string,
): Promise<VethPair> {
  const request = vethPairRequest(plan, peerMac, ctx.workloadNs.fd);
  let replies;
  try {
    replies = await ctx.host.request(request);
  } catch (err) {
    if (!(err instanceof NetlinkError) || err.code !== 'EEXIST') throw err;
    await removeLeftoverOrExplain(ctx, plan);
    replies = await ctx.host.request(request).catch((again: unknown) => {
      if (again instanceof NetlinkError && again.code === 'EEXIST') throw nameTaken(ctx, plan);
      throw again;
    });
  }
  const echoed = vethPairFromEcho(replies);
  let hostIndex = echoed.hostIndex;
  if (hostIndex === undefined) {
    const hostLink: Link | undefined = await getLink(ctx.host, { name: plan.hostName });
    if (!hostLink) throw new Error(`host interface ${plan.hostName} vanished right after it was created`);
    hostIndex = hostLink.index;
  }
  let peerIndex = echoed.peerIndex;
  if (peerIndex === undefined) {
    // Kernels before 6.3 do not echo RTM_NEWLINK; ask the workload namespace instead.
    const peer = await getLink(ctx.workload, { name: plan.ifName });
    if (!peer) throw new Error(`workload interface ${plan.ifName} vanished right after it was created`);
    peerIndex = peer.index;
  }
  return { hostIndex, peerIndex };
}

/**
 * EEXIST has two possible causes. A host link of our name left by an earlier attempt that crashed is
 * deleted (which deletes its peer too), so that the caller can retry. Otherwise the requested name is
 * taken inside the workload namespace, which is the caller's mistake.
 */
async function removeLeftoverOrExplain(ctx: VethPairContext, plan: AttachPlan): Promise<void> {
  const existing = await getLink(ctx.host, { name: plan.hostName });
  if (!existing) throw nameTaken(ctx, plan);
  if (existing.group !== plan.linkGroup && existing.alias !== plan.alias) {
    throw alreadyExists(
      `host interface name ${plan.hostName} is taken by an interface workloadnet did not create (group ${existing.group}); remove or rename it`,
    );
  }
  ctx.logger.warn(
    { key: plan.key, hostIf: plan.hostName, ifindex: existing.index },
    'removing leftover host interface of an earlier attempt',
  );
  try {
    await ctx.host.request(delLinkRequest({ index: existing.index }));
  } catch (err) {
    if (!(err instanceof NetlinkError && err.notFound)) throw err;
  }
}

function nameTaken(ctx: VethPairContext, plan: AttachPlan) {
  return alreadyExists(
    `interface "${plan.ifName}" already exists in network namespace ${ctx.workloadNs.path}; choose another interface name or remove it`,
  );
}

/** Undo of createVethPair: deleting the host end removes both ends and everything on them. */
export async function rollbackVethPair(
  host: NetlinkSocket,
  plan: AttachPlan,
  pair: VethPair,
  logger: Logger,
): Promise<void> {
  try {
    await host.request(delLinkRequest({ index: pair.hostIndex }));
  } catch (err) {
    if (err instanceof NetlinkError && err.notFound) return;
    // The link is in our group with no attachment, so the next reconcile removes it.
    logger.error({ key: plan.key, hostIf: plan.hostName, err: (err as Error).message }, 'rollback failed');
  }
}
