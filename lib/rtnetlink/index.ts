// Our own typed rtnetlink codec and socket.
//
// Why hand-written: no maintained npm library does network namespaces, errno, or non-blocking I/O.
// The `netlink` npm package does synchronous I/O on the main thread (a veth delete then stalls the
// event loop for ~20–40 ms) and reports errors as text without the errno.
//
// Layout: attributes.ts and message.ts are the wire codec; link.ts (with veth.ts and vxlan.ts),
// address.ts, route.ts and neighbour.ts (ARP/NDP entries and VXLAN forwarding databases) build
// requests and decode answers for one kind of object each (mac-address.ts is their MAC text);
// errors.ts turns NLMSG_ERROR into NetlinkError (errno + name + the kernel's extended-ack text);
// socket.ts does the I/O.
//
// Typical use (with lib/netns for the namespace):
//
//   const ns = await NetnsHandle.open('/var/run/netns/x');
//   const sock = NetlinkSocket.openIn(ns);
//   const lo = await getLink(sock, { name: 'lo' });
//   await sock.batchOrThrow([
//     setLinkRequest({ index: 7 }, { up: true, mtu: 1500 }),
//     newAddressRequest({ index: 7, address: '10.0.0.2', prefixLength: 32 }),
//     newRouteRequest({ destination: 'default', gateway: '169.254.1.1', oif: 7, onlink: true }),
//   ]);
//   await sock.close();
//   ns.close();
//
// This file is the stable public surface; import from here, not from the individual files.

export {
  type Attribute,
  type DecodedAttribute,
  NLA_F_NESTED,
  attrBytes,
  attrNest,
  attrS32,
  attrString,
  attrU16,
  attrU32,
  attrU8,
  attributeMap,
  decodeAttributes,
  encodeAttributes,
  getS32,
  getString,
  getU32,
  getU8,
  nlaAlign,
} from './attributes';
export {
  type NetlinkMessage,
  type NetlinkRequest,
  NLM_F_ACK,
  NLM_F_APPEND,
  NLM_F_CREATE,
  NLM_F_DUMP,
  NLM_F_ECHO,
  NLM_F_EXCL,
  NLM_F_MULTI,
  NLM_F_REPLACE,
  NLM_F_REQUEST,
  NLMSG_DONE,
  NLMSG_ERROR,
  decodeMessages,
  encodeMessage,
  encodeMessages,
} from './message';
export {
  type AckPayload,
  type ExtendedAck,
  NetlinkError,
  NetlinkSocketError,
  decodeDoneMessage,
  decodeErrorMessage,
  errnoName,
  messageTypeName,
} from './errors';
export {
  AF_INET,
  AF_INET6,
  AF_UNSPEC,
  type AddressFamily,
  addressBytes,
  canonicalAddress,
  familyOf,
  formatAddress,
  parseCidr,
} from './inet';
export {
  IFF_LOWER_UP,
  IFF_LOOPBACK,
  IFF_RUNNING,
  IFF_UP,
  IPV4_DEVCONF_FORWARDING,
  IPV4_DEVCONF_PROXY_ARP,
  IPV4_DEVCONF_RP_FILTER,
  RTM_DELLINK,
  RTM_GETLINK,
  RTM_NEWLINK,
  RTM_SETLINK,
  type Link,
  type LinkSelector,
  type LinkSettings,
  type NewLinkSpec,
  decodeLink,
  delLinkRequest,
  dumpLinksRequest,
  getLink,
  getLinkRequest,
  listLinks,
  newLinkRequest,
  setLinkRequest,
} from './link';
export { formatMac, macBytes } from './mac-address';
export { type VethSpec, newVethRequest } from './veth';
export {
  IFA_F_DADFAILED,
  IFA_F_NODAD,
  IFA_F_NOPREFIXROUTE,
  IFA_F_PERMANENT,
  IFA_F_TENTATIVE,
  RTM_DELADDR,
  RTM_GETADDR,
  RTM_NEWADDR,
  type Address,
  type AddressSpec,
  decodeAddress,
  delAddressRequest,
  dumpAddressesRequest,
  listAddresses,
  newAddressRequest,
} from './address';
export {
  RTM_DELROUTE,
  RTM_GETROUTE,
  RTM_NEWROUTE,
  RTNH_F_ONLINK,
  RTPROT_BOOT,
  RTPROT_KERNEL,
  RTPROT_STATIC,
  RTPROT_WORKLOADNET,
  RTN_UNICAST,
  RTN_UNREACHABLE,
  RT_SCOPE_HOST,
  RT_SCOPE_LINK,
  RT_SCOPE_UNIVERSE,
  RT_TABLE_MAIN,
  type Route,
  type RouteSpec,
  decodeRoute,
  delRouteRequest,
  dumpRoutesRequest,
  listRoutes,
  lookupRoute,
  lookupRouteRequest,
  newRouteRequest,
} from './route';
export {
  IFLA_VXLAN_ID,
  IFLA_VXLAN_LEARNING,
  IFLA_VXLAN_LOCAL,
  IFLA_VXLAN_PORT,
  type VxlanInfo,
  type VxlanSpec,
  decodeVxlanInfo,
  vxlanInfoData,
} from './vxlan';
export {
  AF_BRIDGE,
  NTF_SELF,
  NUD_NOARP,
  NUD_PERMANENT,
  RTM_DELNEIGH,
  RTM_GETNEIGH,
  RTM_NEWNEIGH,
  type Neighbour,
  type NeighbourFamily,
  type NeighbourSpec,
  decodeNeighbour,
  delNeighbourRequest,
  dumpNeighboursRequest,
  listNeighbours,
  newNeighbourRequest,
} from './neighbour';
export { type BatchOutcome, NetlinkSocket, type NetlinkSocketOptions } from './socket';
export { BlockingNetlinkSocket } from './blocking-socket';
export {
  RTNLGRP_IPV4_IFADDR,
  RTNLGRP_IPV4_ROUTE,
  RTNLGRP_IPV6_IFADDR,
  RTNLGRP_IPV6_ROUTE,
  RTNLGRP_LINK,
  RTNLGRP_NEIGH,
  joinGroups,
} from './groups';
