// An interface with no IPv6 address of ours gets no IPv6 link-local address either, on neither end of
// the link. The kernel otherwise gives each end an fe80:: address when it comes up, with its routes,
// multicast memberships and duplicate address detection: work done under the RTNL lock by its
// address-configuration workers while the next attach waits for that lock, and undone again at detach.
// An IPv4-only workload has no use for it: nothing routes IPv6 to it, and its namespace keeps ::1.
// Leaving it out roughly halves the workload side's write (docs/benchmarks.md, "Settled and fresh").
//
// The setting must be made before the interface comes up (a veth end's link-local is configured once
// both ends are up: the carrier), and cannot ride on the create (EAFNOSUPPORT). It is refused where the
// interface has no IPv6 state at all, which is also where nothing needs turning off: a kernel without
// IPv6, and an MTU below IPv6's minimum. Those are not asked. An operator who wants the addresses
// (the kernel's default, and the reference plugins') sets linux.ipv6LinkLocal.

import * as fs from 'node:fs';
import { IN6_ADDR_GEN_MODE_NONE, setLinkRequest } from '../../lib/rtnetlink/link';
import type { NetlinkRequest } from '../../lib/rtnetlink/message';

/** IPv6's minimum MTU (RFC 8200): below it the kernel keeps no IPv6 state on the interface. */
export const IPV6_MIN_MTU = 1280;

let kernelIpv6: boolean | undefined;

/** Whether this kernel has IPv6 (not booted with ipv6.disable=1). */
function kernelHasIpv6(): boolean {
  kernelIpv6 ??= fs.existsSync('/proc/sys/net/ipv6');
  return kernelIpv6;
}

/** What decides it: the interface's IPv6 addresses, its MTU, and whether the operator keeps them. */
export interface LinkLocalInput {
  v6: readonly unknown[];
  mtu: number;
  ipv6LinkLocal?: boolean;
}

/** Whether the interface goes without IPv6 link-local addresses (see the top). */
function withoutLinkLocal(iface: LinkLocalInput): boolean {
  return (
    iface.ipv6LinkLocal !== true && iface.v6.length === 0 && iface.mtu >= IPV6_MIN_MTU && kernelHasIpv6()
  );
}

/** The request that keeps the interface `index` from getting a link-local address, when it should. */
export function noLinkLocalRequests(index: number, iface: LinkLocalInput): NetlinkRequest[] {
  return withoutLinkLocal(iface)
    ? [setLinkRequest({ index }, { inet6AddrGenMode: IN6_ADDR_GEN_MODE_NONE })]
    : [];
}
