// Creating a veth pair: RTM_NEWLINK of kind "veth" whose IFLA_INFO_DATA carries the peer. Its own file,
// as vxlan.ts is for vxlan links, because the peer is not a plain nest but a second ifinfomsg with its
// own IFLA_* attributes, and because where the peer is born (another namespace, under its final name)
// is what the whole attach relies on.

import { attrBytes, attrString, attrU32, encodeAttributes, type Attribute } from './attributes';
import {
  IFLA_ADDRESS,
  IFLA_IFNAME,
  IFLA_MTU,
  IFLA_NET_NS_FD,
  encodeIfinfomsg,
  newLinkRequest,
  queueAttributes,
} from './link';
import { macBytes } from './mac-address';
import type { NetlinkRequest } from './message';

// Inside IFLA_INFO_DATA of a veth: the peer's ifinfomsg followed by its own IFLA_* attributes.
export const VETH_INFO_PEER = 1;

export interface VethSpec {
  /** The end created in the socket's namespace. */
  name: string;
  mtu?: number;
  mac?: string;
  group?: number;
  /**
   * Bring this end up as part of the create. Only this end can be: the peer is configured before the
   * pair is linked, and opening a veth without a peer fails with ENOTCONN.
   */
  up?: boolean;
  /**
   * IFLA_NUM_TX_QUEUES and IFLA_NUM_RX_QUEUES of both ends. Without them a veth is allocated with a
   * queue per possible CPU and then cut down to one real queue, and cutting down the transmit queues
   * waits for an expedited RCU grace period (synchronize_net under the RTNL lock), once per end: with
   * the other CPU busy those waits were about half of the create (see docs/benchmarks.md).
   */
  queues?: number;
  peer: {
    name: string;
    mtu?: number;
    mac?: string;
    /** Create the peer directly inside this namespace (IFLA_NET_NS_FD), already under its name. */
    netnsFd?: number;
  };
}

/**
 * RTM_NEWLINK for a veth pair. With `peer.netnsFd` the peer is born inside that namespace under its
 * final name, so it never appears (or collides) in the creating namespace. With `echo` the reply
 * includes the new link, whose IFLA_LINK is the peer's ifindex: no GETLINK needed afterwards.
 */
export function newVethRequest(spec: VethSpec, opts: { echo?: boolean } = {}): NetlinkRequest {
  const peerAttrs: Attribute[] = [attrString(IFLA_IFNAME, spec.peer.name)];
  if (spec.peer.mtu !== undefined) peerAttrs.push(attrU32(IFLA_MTU, spec.peer.mtu));
  if (spec.peer.mac !== undefined) peerAttrs.push(attrBytes(IFLA_ADDRESS, macBytes(spec.peer.mac)));
  if (spec.peer.netnsFd !== undefined) peerAttrs.push(attrU32(IFLA_NET_NS_FD, spec.peer.netnsFd));
  peerAttrs.push(...queueAttributes(spec.queues));
  // VETH_INFO_PEER is not a plain nest: it starts with the peer's own ifinfomsg.
  const peer = attrBytes(VETH_INFO_PEER, Buffer.concat([encodeIfinfomsg(), encodeAttributes(peerAttrs)]));
  return newLinkRequest(
    {
      name: spec.name,
      kind: 'veth',
      mtu: spec.mtu,
      mac: spec.mac,
      group: spec.group,
      up: spec.up,
      infoData: [peer],
      queues: spec.queues,
    },
    opts,
  );
}
