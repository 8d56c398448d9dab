// The workload's end of a link, inside the workload's namespace, whichever backend provides the link
// (a veth end born there, or a DPU's VF moved there): loopback up, the interface up with its MTU, its
// /32 and /128 addresses, and routes through the link-local gateway. The gateway is not on any subnet
// of the workload, so a "scope link" host route to it comes first: it tells the kernel that the
// gateway is directly on the interface, after which the default route via it is accepted. (An
// "onlink" default route would do without the host route, but then the gateway is not a route a
// reader can see in `ip route`, and the kernel accepts it on any interface, right or wrong.)
//
// A namespace may hold several of our interfaces (a workload's eth0 and net1, or two workloads sharing
// it), all with the same link-local gateway. Only one of them carries the default route (the core
// decides which: `defaultRoute`); the others route only their network's ranges through the gateway.
// Two "169.254.1.1/32 dev X scope link" routes of the same metric clash (EEXIST) even on different
// interfaces, so the routes of an interface without the default route carry a metric of their own:
// its ifindex, unique in the namespace. The interface with the default route keeps metric 0, as a
// workload with one interface always had.
//
// This file is part of the Linux backend's public netlink surface: the DPU backend configures and
// checks the VFs it moves into workloads with it, so both backends give a workload the same side.

import type { Drift, IpAssignment, RouteInfo } from '../../core/backend';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import { IFA_F_NODAD, listAddresses, newAddressRequest } from '../../lib/rtnetlink/address';
import { noLinkLocalRequests } from './link-local';
import { AF_INET, AF_INET6, canonicalAddress } from '../../lib/rtnetlink/inet';
import { getLink, setLinkRequest } from '../../lib/rtnetlink/link';
import type { NetlinkRequest } from '../../lib/rtnetlink/message';
import { RT_SCOPE_LINK, RTPROT_STATIC, listRoutes, newRouteRequest } from '../../lib/rtnetlink/route';
import { NetlinkSocket } from '../../lib/rtnetlink/socket';

export interface PlannedAddress {
  /** Canonical text. */
  address: string;
  /** 32 or 128: routed model, every workload address is a host route. */
  prefixLength: number;
}

/** What the workload's interface gets. */
export interface WorkloadInterface {
  /** Interface name inside the workload namespace. */
  ifName: string;
  mtu: number;
  v4: PlannedAddress[];
  v6: PlannedAddress[];
  /** Link-local gateways the workload routes through (decided by the core with each address). */
  gatewayV4: string;
  gatewayV6: string;
  /** Whether this interface carries the namespace's default routes. */
  defaultRoute: boolean;
  /** Without the default route: the ranges (canonical CIDRs) routed through this interface's gateway. */
  routes: string[];
  /** Keep the kernel's IPv6 link-local address although the interface has no IPv6 address (link-local.ts). */
  ipv6LinkLocal?: boolean;
}

/** What the workload interface is made from: an AttachSpec, a stored AttachmentView, a DPU placement. */
export interface WorkloadInterfaceInput {
  ifName: string;
  mtu: number;
  ips: readonly IpAssignment[];
  /** Absent means yes: attachments recorded before networks existed all carry the default route. */
  defaultRoute?: boolean;
  routes?: readonly string[];
}

/** The workload interface for an attachment's name, MTU and addresses. */
export function workloadInterface(input: WorkloadInterfaceInput): WorkloadInterface {
  const v4 = input.ips.filter((ip) => ip.family === 4);
  const v6 = input.ips.filter((ip) => ip.family === 6);
  return {
    ifName: input.ifName,
    mtu: input.mtu,
    v4: v4.map((ip) => ({ address: canonicalAddress(ip.address), prefixLength: 32 })),
    v6: v6.map((ip) => ({ address: canonicalAddress(ip.address), prefixLength: 128 })),
    gatewayV4: v4[0] ? canonicalAddress(v4[0].gateway) : '',
    gatewayV6: v6[0] ? canonicalAddress(v6[0].gateway) : '',
    defaultRoute: input.defaultRoute !== false,
    routes: input.defaultRoute === false ? (input.routes ?? []).map(canonicalCidr) : [],
  };
}

function canonicalCidr(cidr: string): string {
  const slash = cidr.indexOf('/');
  return `${canonicalAddress(cidr.slice(0, slash))}${cidr.slice(slash)}`;
}

/** The ranges of one family that an interface without the default route sends through its gateway. */
function rangesOf(iface: WorkloadInterface, family: 4 | 6): string[] {
  return iface.routes.filter((r) => r.includes(':') === (family === 6));
}

/** Metric of an interface's routes: 0 with the default route, else its ifindex (see the top). */
export function routeMetric(iface: WorkloadInterface, index: number): number {
  return iface.defaultRoute ? 0 : index;
}

/** Routes programmed inside the workload namespace, as reported in results. */
export function workloadRoutes(iface: WorkloadInterface): RouteInfo[] {
  const routes: RouteInfo[] = [];
  if (iface.v4.length > 0) {
    routes.push({ destination: `${iface.gatewayV4}/32` });
    for (const destination of iface.defaultRoute ? ['0.0.0.0/0'] : rangesOf(iface, 4))
      routes.push({ destination, gateway: iface.gatewayV4 });
  }
  if (iface.v6.length > 0)
    for (const destination of iface.defaultRoute ? ['::/0'] : rangesOf(iface, 6))
      routes.push({ destination, gateway: iface.gatewayV6 });
  return routes;
}

export interface WorkloadSideOptions {
  /**
   * Replace addresses and routes that already exist instead of failing: for an interface adopted
   * half-configured (a DPU port re-plumbed after a crash). A fresh interface fails on a clash instead.
   */
  replace?: boolean;
}

/** All requests for the workload side, in order, for one write. `index` is the ifindex in the namespace. */
export function workloadSideRequests(
  iface: WorkloadInterface,
  index: number,
  opts: WorkloadSideOptions = {},
): NetlinkRequest[] {
  const replace = opts.replace === true;
  const noLinkLocal = noLinkLocalRequests(index, iface);
  const reqs: NetlinkRequest[] = [
    setLinkRequest({ name: 'lo' }, { up: true }),
    ...(noLinkLocal.length === 0
      ? [setLinkRequest({ index }, { up: true, mtu: iface.mtu })]
      : // Before the interface comes up (link-local.ts), and after its MTU is set: a DPU's VF may
        // arrive with an MTU below IPv6's minimum, and so without IPv6 state to set.
        [
          setLinkRequest({ index }, { mtu: iface.mtu }),
          ...noLinkLocal,
          setLinkRequest({ index }, { up: true }),
        ]),
  ];
  for (const a of [...iface.v4, ...iface.v6]) {
    // NODAD: the address must work the moment Attach returns, not after duplicate detection.
    reqs.push(
      newAddressRequest(
        { index, address: a.address, prefixLength: a.prefixLength, flags: IFA_F_NODAD },
        { replace },
      ),
    );
  }
  const priority = routeMetric(iface, index);
  const via = (destination: string, gateway: string): NetlinkRequest =>
    newRouteRequest(
      { destination, gateway, oif: index, protocol: RTPROT_STATIC, ...(priority ? { priority } : {}) },
      { replace },
    );
  if (iface.v4.length > 0) {
    reqs.push(
      newRouteRequest(
        {
          destination: `${iface.gatewayV4}/32`,
          oif: index,
          scope: RT_SCOPE_LINK,
          protocol: RTPROT_STATIC,
          ...(priority ? { priority } : {}),
        },
        { replace },
      ),
    );
    for (const dst of iface.defaultRoute ? ['default'] : rangesOf(iface, 4))
      reqs.push(via(dst, iface.gatewayV4));
  }
  if (iface.v6.length > 0)
    for (const dst of iface.defaultRoute ? ['default'] : rangesOf(iface, 6))
      reqs.push(via(dst, iface.gatewayV6));
  return reqs;
}

/**
 * Differences between the workload's namespace and the interface it should have. Opens the namespace
 * by path and reports it missing, or re-pointed to another namespace (another inode), as drift.
 */
export function checkWorkloadNamespace(
  netnsPath: string,
  netnsInode: number,
  iface: WorkloadInterface,
  expectedMac?: string,
): Promise<Drift[]> {
  return inWorkloadNamespace(netnsPath, netnsInode, (sock) => checkWorkloadSide(sock, iface, expectedMac));
}

/**
 * Only whether the interface is there (Backend.check's `presence` scope): the namespace as above, then
 * one link lookup by name; its addresses and routes are not read.
 */
export function checkWorkloadPresence(
  netnsPath: string,
  netnsInode: number,
  ifName: string,
): Promise<Drift[]> {
  return inWorkloadNamespace(netnsPath, netnsInode, async (sock) =>
    (await getLink(sock, { name: ifName })) ? [] : [interfaceMissing(ifName)],
  );
}

/** `check` run on a socket in the workload's namespace, or the namespace's own drift. */
async function inWorkloadNamespace(
  netnsPath: string,
  netnsInode: number,
  check: (sock: NetlinkSocket) => Promise<Drift[]>,
): Promise<Drift[]> {
  let ns: NetnsHandle;
  try {
    ns = await NetnsHandle.open(netnsPath);
  } catch (err) {
    return [
      {
        kind: 'netns-missing',
        message: `network namespace ${netnsPath} cannot be opened: ${(err as Error).message}`,
      },
    ];
  }
  try {
    if (ns.inode !== netnsInode) {
      return [
        {
          kind: 'netns-changed',
          message: `${netnsPath} now names another network namespace (inode ${ns.inode}, expected ${netnsInode})`,
        },
      ];
    }
    const sock = NetlinkSocket.openIn(ns);
    try {
      return await check(sock);
    } finally {
      void sock.close();
    }
  } finally {
    ns.close();
  }
}

function interfaceMissing(ifName: string): Drift {
  return {
    kind: 'interface-missing',
    message: `interface ${ifName} is missing from the workload's namespace`,
  };
}

/** Differences between the interface as the workload's namespace has it and as it should be. */
export async function checkWorkloadSide(
  sock: NetlinkSocket,
  iface: WorkloadInterface,
  expectedMac?: string,
): Promise<Drift[]> {
  const link = await getLink(sock, { name: iface.ifName });
  if (!link) return [interfaceMissing(iface.ifName)];
  const drift: Drift[] = [];
  if (!link.up) drift.push({ kind: 'interface-down', message: `interface ${iface.ifName} is down` });
  if (link.mtu !== iface.mtu) {
    drift.push({
      kind: 'mtu-changed',
      message: `interface ${iface.ifName} has MTU ${link.mtu}, expected ${iface.mtu}`,
    });
  }
  if (expectedMac && link.mac !== expectedMac) {
    drift.push({
      kind: 'mac-changed',
      message: `interface ${iface.ifName} has MAC ${link.mac ?? '(none)'}, expected ${expectedMac}`,
    });
  }
  const addrs = await listAddresses(sock, { index: link.index });
  for (const want of [...iface.v4, ...iface.v6]) {
    const have = addrs.filter((a) => a.address === want.address);
    if (have.length === 0) {
      drift.push({
        kind: 'address-missing',
        message: `${want.address}/${want.prefixLength} is missing from ${iface.ifName}`,
      });
    } else if (!have.some((a) => a.prefixLength === want.prefixLength)) {
      drift.push({
        kind: 'address-changed',
        message: `${want.address} on ${iface.ifName} has prefix /${have[0]?.prefixLength}, expected /${want.prefixLength}`,
      });
    }
  }
  if (iface.v4.length > 0) {
    const routes = await listRoutes(sock, AF_INET, { oif: link.index });
    if (!routes.some((r) => r.destination === `${iface.gatewayV4}/32` && r.gateway === undefined)) {
      drift.push({
        kind: 'route-missing',
        message: `route to the gateway ${iface.gatewayV4} via ${iface.ifName} is missing`,
      });
    }
    drift.push(
      ...missingRoutes(
        routes,
        iface.defaultRoute ? ['0.0.0.0/0'] : rangesOf(iface, 4),
        iface.gatewayV4,
        iface,
      ),
    );
  }
  if (iface.v6.length > 0) {
    const routes = await listRoutes(sock, AF_INET6, { oif: link.index });
    drift.push(
      ...missingRoutes(routes, iface.defaultRoute ? ['::/0'] : rangesOf(iface, 6), iface.gatewayV6, iface),
    );
  }
  return drift;
}

function missingRoutes(
  have: ReadonlyArray<{ destination: string; gateway?: string }>,
  want: readonly string[],
  gateway: string,
  iface: WorkloadInterface,
): Drift[] {
  // By set, not by search: the host port routes every range of the cluster (5,000 at 5,000 peers), and
  // searching the list for each is quadratic, a long hold of the event loop per check.
  const held = new Set(have.filter((r) => r.gateway === gateway).map((r) => r.destination));
  return want
    .filter((dst) => !held.has(dst))
    .map((dst) => ({
      kind: 'route-missing',
      message: dst.endsWith('/0')
        ? `IPv${dst.includes(':') ? 6 : 4} default route via ${gateway} dev ${iface.ifName} is missing`
        : `route to ${dst} via ${gateway} dev ${iface.ifName} is missing`,
    }));
}
