import {
  AF_INET,
  AF_INET6,
  listAddresses,
  listRoutes,
  type Link,
  type NetlinkSocket,
} from '../../lib/rtnetlink';

// The agent names the netdev that the daemon moves into a workload. An agent is not trusted with the
// host: acked as the node's uplink, that uplink would become a workload's eth0 (and the node would lose
// its network); acked as `lo`, the node's loopback would be taken down. So before anything is touched,
// the named netdev must look like what a DPU hands out, a VF nobody on the host uses: the port's MAC,
// no address, no route through it, not one of our own workload links, not part of a bridge or bond.
// Anything else is refused with the reason, and nothing is moved.

/** Interface kinds that aggregate others: never a VF. */
const MASTER_KINDS = new Set(['bridge', 'bond', 'team', 'openvswitch', 'vrf']);
const IFF_LOOPBACK = 0x8;

export interface GuardContext {
  /** The host namespace's socket, where the netdev sits before the move. */
  sock: NetlinkSocket;
  /** Link groups that mark the Linux backend's own links (workload host ends, links being deleted). */
  ourGroups: readonly number[];
}

/** Why `link` must not be moved into a workload as the port with `portMac`, or undefined when it may. */
export async function refuseEndpoint(
  ctx: GuardContext,
  link: Link,
  portMac: string,
): Promise<string | undefined> {
  if (link.name === 'lo' || (link.flags & IFF_LOOPBACK) !== 0) return 'it is the loopback interface';
  if (ctx.ourGroups.includes(link.group)) {
    return `it is in workloadnet's link group ${link.group} (another workload's host interface)`;
  }
  if (link.masterIndex) return `it is a member of interface ${link.masterIndex} (a bridge or bond port)`;
  if (link.kind && MASTER_KINDS.has(link.kind)) return `it is a ${link.kind}`;
  if (link.mac?.toLowerCase() !== portMac.toLowerCase()) {
    return `it carries MAC ${link.mac ?? '(none)'}, not the port's ${portMac}`;
  }
  const addresses = (await listAddresses(ctx.sock, { index: link.index })).filter(
    (a) => !isIpv6LinkLocal(a.address),
  );
  if (addresses.length > 0)
    return `it carries address ${addresses[0]?.address}/${addresses[0]?.prefixLength}`;
  for (const family of [AF_INET, AF_INET6] as const) {
    const routes = (await listRoutes(ctx.sock, family, { oif: link.index })).filter(
      (r) => !isIpv6LinkLocal(r.destination.split('/')[0] ?? ''),
    );
    if (routes.length > 0) return `it is the device of route ${routes[0]?.destination}`;
  }
  return undefined;
}

/** fe80::/10: every IPv6 interface that is up has one; it says nothing about the link being in use. */
function isIpv6LinkLocal(address: string): boolean {
  return /^fe[89ab][0-9a-f]:/i.test(address);
}
