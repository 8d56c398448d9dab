// Multicast groups of NETLINK_ROUTE (enum rtnetlink_groups): a socket that joins one hears every change
// the kernel makes to that table, whoever made it, as the same RTM_NEW*/RTM_DEL* messages a dump gives.

import * as fs from 'node:fs';
import { SOL_NETLINK, setsockoptInt } from '../libc';
import { RTM_GETLINK, encodeIfinfomsg } from './link';
import { NLM_F_REQUEST, encodeMessage } from './message';

export const RTNLGRP_LINK = 1;
export const RTNLGRP_NEIGH = 3;
export const RTNLGRP_IPV4_IFADDR = 5;
export const RTNLGRP_IPV4_ROUTE = 7;
export const RTNLGRP_IPV6_IFADDR = 9;
export const RTNLGRP_IPV6_ROUTE = 11;

const NETLINK_ADD_MEMBERSHIP = 1;

/**
 * Joins `groups` on a NETLINK_ROUTE socket fd and makes sure it has a port id. A socket that never
 * sent anything has port id 0, and the kernel skips it for notifications it originates itself (their
 * sender's port id is 0 too), so one harmless request is sent first; its answer is read (and
 * ignored) by whoever reads the socket.
 */
export function joinGroups(fd: number, groups: readonly number[]): void {
  // A GETLINK of index 1 (loopback) without a dump: one small answer.
  const payload = encodeIfinfomsg({ index: 1 });
  fs.writeSync(fd, encodeMessage({ type: RTM_GETLINK, flags: NLM_F_REQUEST, seq: 1, pid: 0, payload }));
  for (const g of groups) setsockoptInt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, g);
}
