import type { CheckScope, Drift, IpAssignment } from '../../core/backend';
import {
  WorkloadNetError,
  failedPrecondition,
  internal,
  invalidArgument,
  knownWorkloadNetError,
} from '../../core/errors';
import type { Logger } from '../../core/logger';
import { NetnsError } from '../../lib/netns/netns-error';
import { NetnsHandle, type Netns } from '../../lib/netns/netns-handle';
import {
  NetlinkError,
  NetlinkSocket,
  getLink,
  listLinks,
  setLinkRequest,
  type Link,
} from '../../lib/rtnetlink';
import {
  checkWorkloadNamespace,
  checkWorkloadPresence,
  workloadInterface,
  workloadSideRequests,
} from '../interface/workload-side';
import { refuseEndpoint } from './endpoint-guard';
import { nudgeGateways } from './gateway-nudge';
import { endpointOfAlias, returnName, returnVf, vfAlias } from './vf-return';

// The host's half of a DPU port. The agent exposes each port to the host as a netdev (an SR-IOV VF on
// real hardware, a veth end in the simulator); the daemon moves it into the workload's namespace,
// names it as the runtime asked, and configures the workload's side exactly as the Linux backend does
// for its veths (backends/interface/workload-side.ts). The packet path behind the netdev is the DPU's
// business. On detach the netdev goes back to the host namespace under its own name, so the agent
// finds its VF where it left it. Which netdev goes back is told by its index and the port's MAC, never
// by a name found in the workload's namespace: there a name can be anyone's (the workload's eth0 from
// another network), and the agent's word for it is not trusted with the workload's interfaces.

export interface PlumbRequest {
  /** Netdev name the agent reported, in the host namespace. */
  endpoint: string;
  netnsPath: string;
  netnsInode: number;
  ifName: string;
  mtu: number;
  /** The MAC the port was programmed with; used to recognise a netdev that was already moved. */
  mac: string;
  ips: IpAssignment[];
  /** The network's routing, as in AttachSpec (absent: the default route). */
  defaultRoute?: boolean;
  routes?: string[];
  /** The workload's namespace, when the caller has it open (an Attach); else it is opened by path. */
  netns?: Netns;
}

/** A VF an attach cut short may have left in a workload: only the row's word for it is known. */
export interface StrandedRequest {
  /** The port's MAC, as the row recorded it (the plan, written before the agent answered). */
  mac: string;
  netnsPath: string;
  netnsInode: number;
}

/** Where a port's host end belongs: everything plumb needs except the netdev, MAC and open namespace. */
export type WorkloadPlacement = Omit<PlumbRequest, 'endpoint' | 'mac' | 'netns'>;

export interface UnplumbRequest {
  /** The name the netdev gets back in the host namespace. */
  endpoint: string;
  /** The port's MAC: the netdev was moved in only because it carried it (endpoint-guard.ts). */
  mac: string;
  /** Its index in the workload namespace, as plumb returned it; 0 when not known. */
  ifIndex: number;
  netnsPath: string;
  netnsInode: number;
  ifName: string;
}

export interface InspectRequest {
  netnsPath: string;
  netnsInode: number;
  ifName: string;
  mtu: number;
  ips: IpAssignment[];
  defaultRoute?: boolean;
  routes?: string[];
}

export interface HostSide {
  /** Moves the endpoint into the workload namespace and configures it; returns its MAC and index there. */
  plumb(req: PlumbRequest): Promise<{ mac: string; ifIndex: number }>;
  /**
   * Returns the link plumb moved in to the host namespace; succeeds when the namespace or link is gone.
   * No other link is touched.
   */
  unplumb(req: UnplumbRequest): Promise<void>;
  /**
   * Returns to the host the VF an attach cut short left in a workload namespace that still lives: the
   * one link there carrying both the port's MAC and the mark plumb put on it (vfAlias). Returns the
   * name it went back under, or undefined when there was none. No other link is touched.
   */
  returnStranded(req: StrandedRequest): Promise<string | undefined>;
  /** Differences between the workload interface and what was recorded (or only whether it is there). */
  inspect(req: InspectRequest, scope?: CheckScope): Promise<Drift[]>;
  /** Names of the links currently in the host namespace (one dump). */
  hostLinkNames(): Promise<Set<string>>;
  close(): Promise<void>;
}

export function createHostSide(
  hostNetnsPath: string | undefined,
  ourGroups: readonly number[],
  log: Logger,
): HostSide {
  return new NetlinkHostSide(hostNetnsPath, ourGroups, log);
}

/** The workload namespace, opened and checked against the inode recorded when the call was validated. */
async function openWorkloadNetns(path: string, inode: number): Promise<NetnsHandle | undefined> {
  let ns: NetnsHandle;
  try {
    ns = await NetnsHandle.open(path);
  } catch (err) {
    if (err instanceof NetnsError && err.notFound) return undefined;
    throw err;
  }
  if (inode && ns.inode !== inode) {
    // The path now names another namespace (the workload died and something else took its place):
    // touching it would program a stranger.
    ns.close();
    return undefined;
  }
  return ns;
}

/** The agent named a netdev that is not one to hand to a workload (see endpoint-guard.ts). */
export class EndpointRefused extends WorkloadNetError {
  constructor(message: string) {
    super('FAILED_PRECONDITION', message);
    this.name = 'EndpointRefused';
  }
}

function netlinkFailure(what: string, err: unknown): WorkloadNetError {
  const known = knownWorkloadNetError(err);
  if (known) return known;
  if (err instanceof NetlinkError) return internal(`${what}: ${err.message}`);
  return internal(`${what}: ${(err as Error).message ?? String(err)}`);
}

class NetlinkHostSide implements HostSide {
  private host: Promise<{ ns: NetnsHandle; sock: NetlinkSocket }> | undefined;

  constructor(
    private readonly hostNetnsPath: string | undefined,
    private readonly ourGroups: readonly number[],
    private readonly log: Logger,
  ) {}

  /** The host namespace and a netlink socket in it, opened on first use and kept. */
  private hostNs(): Promise<{ ns: NetnsHandle; sock: NetlinkSocket }> {
    this.host ??= (async () => {
      const ns = this.hostNetnsPath ? await NetnsHandle.open(this.hostNetnsPath) : NetnsHandle.own();
      return { ns, sock: NetlinkSocket.openIn(ns) };
    })();
    // A failed open is not cached: the next call tries again.
    this.host.catch(() => (this.host = undefined));
    return this.host;
  }

  async plumb(req: PlumbRequest): Promise<{ mac: string; ifIndex: number }> {
    const host = await this.hostNs();
    const wns = req.netns ?? (await openWorkloadNetns(req.netnsPath, req.netnsInode));
    if (!wns) {
      throw invalidArgument(
        `network namespace ${req.netnsPath} is gone or was replaced; is the workload still running?`,
      );
    }
    const wsock = NetlinkSocket.openIn(wns);
    try {
      let link = await this.moveIn(req, host.sock, wns, wsock);
      try {
        link = await this.configure(req, wsock, link);
      } catch (err) {
        await returnVf(req.endpoint, link.index, wsock, host.ns, this.log).catch((undoErr: unknown) =>
          this.log.error(
            { endpoint: req.endpoint, err: (undoErr as Error).message },
            'could not return the endpoint after a failed attach',
          ),
        );
        throw netlinkFailure(`configuring ${req.ifName} (endpoint ${req.endpoint}) in ${req.netnsPath}`, err);
      }
      return { mac: link.mac ?? req.mac, ifIndex: link.index };
    } finally {
      await wsock.close();
      // A namespace the caller opened is the caller's to close.
      if (wns !== req.netns) wns.close();
    }
  }

  /** Puts the endpoint into the workload namespace; returns it as seen there. */
  private async moveIn(
    req: PlumbRequest,
    hostSock: NetlinkSocket,
    wns: Netns,
    wsock: NetlinkSocket,
  ): Promise<Link> {
    const inHost = await getLink(hostSock, { name: req.endpoint });
    if (!inHost) {
      // A repeated attach (a repair, or a retry after the daemon crashed mid-way) finds the netdev
      // already moved and renamed: adopt the one carrying the port's MAC.
      const there = await this.plumbedLink(wsock, { ...req, ifIndex: 0 });
      if (there) return there;
      throw internal(
        `the DPU agent reported endpoint ${req.endpoint}, but no such netdev exists in the host namespace ${this.hostNetnsPath ?? "(the daemon's own)"}`,
      );
    }
    const refused = await refuseEndpoint({ sock: hostSock, ourGroups: this.ourGroups }, inHost, req.mac);
    if (refused) {
      throw new EndpointRefused(
        `the DPU agent reported ${req.endpoint} as the host end of its port, but ${refused}; refusing to move it into ${req.netnsPath}`,
      );
    }
    try {
      // Down first: a VF that is up in the host may be in use there, and renaming needs it down. Marked
      // before it moves: a daemon killed from here on finds it by its mark (returnStranded).
      await hostSock.request(setLinkRequest({ index: inHost.index }, { up: false }));
      await hostSock.request(setLinkRequest({ index: inHost.index }, { alias: vfAlias(req.endpoint) }));
      await hostSock.request(setLinkRequest({ index: inHost.index }, { netnsFd: wns.fd }));
    } catch (err) {
      // Still in the host: leave it as it was found.
      await hostSock
        .request(setLinkRequest({ index: inHost.index }, { alias: inHost.alias ?? '' }))
        .catch(() => undefined);
      if (inHost.up) {
        await hostSock.request(setLinkRequest({ index: inHost.index }, { up: true })).catch(() => undefined);
      }
      throw netlinkFailure(`moving endpoint ${req.endpoint} into ${req.netnsPath}`, err);
    }
    // The ifindex survives the move unless it is taken in the target; look it up by name to be sure.
    const moved = await getLink(wsock, { name: req.endpoint });
    if (!moved) throw internal(`endpoint ${req.endpoint} vanished while being moved into ${req.netnsPath}`);
    return moved;
  }

  /**
   * Names the netdev as the runtime asked and configures it like any workload interface. Addresses and
   * routes are replaced rather than added: a re-plumbed netdev may still carry them.
   */
  private async configure(req: PlumbRequest, wsock: NetlinkSocket, link: Link): Promise<Link> {
    const index = link.index;
    if (link.name !== req.ifName) await wsock.request(setLinkRequest({ index }, { name: req.ifName }));
    const iface = workloadInterface(req);
    await wsock.batchOrThrow(workloadSideRequests(iface, index, { replace: true }));
    await nudgeGateways(wsock, index, iface);
    return (await getLink(wsock, { index })) ?? link;
  }

  async unplumb(req: UnplumbRequest): Promise<void> {
    const wns = await openWorkloadNetns(req.netnsPath, req.netnsInode);
    // Gone with its workload: a veth went with it, and a VF went back to the initial namespace.
    if (!wns) return;
    const wsock = NetlinkSocket.openIn(wns);
    try {
      const link = await this.plumbedLink(wsock, req);
      if (!link) return;
      const host = await this.hostNs();
      // The host port's workload namespace is the host's: there a link carrying the port's MAC that is
      // neither at the recorded index nor named as plumbed is the VF its agent (re-)created and nobody
      // moved in; it is where it belongs already.
      if (wns.inode === host.ns.inode && link.index !== req.ifIndex && link.name !== req.ifName) return;
      await returnVf(req.endpoint, link.index, wsock, host.ns, this.log);
    } catch (err) {
      if (err instanceof NetlinkError && err.notFound) return;
      throw netlinkFailure(`returning endpoint ${req.endpoint} from ${req.netnsPath} to the host`, err);
    } finally {
      await wsock.close();
      wns.close();
    }
  }

  /**
   * The link moved in for the port: the one at its recorded index while it carries the port's MAC, else
   * the one link there carrying that MAC (a record without the index, or a VF re-created and plumbed
   * again). Undefined when none does; an error when several do, since which one is the port's cannot be
   * told.
   */
  private async plumbedLink(
    wsock: NetlinkSocket,
    req: { mac: string; ifIndex: number; netnsPath: string },
  ): Promise<Link | undefined> {
    const mac = req.mac.toLowerCase();
    if (!mac) return undefined;
    if (req.ifIndex > 0) {
      const link = await getLink(wsock, { index: req.ifIndex });
      if (link?.mac?.toLowerCase() === mac) return link;
    }
    const carrying = (await listLinks(wsock)).filter((l) => l.mac?.toLowerCase() === mac);
    if (carrying.length > 1) {
      throw failedPrecondition(
        `${carrying.length} links in ${req.netnsPath} carry the port's MAC ${mac} (${carrying.map((l) => l.name).join(', ')}); which one is the port's cannot be told, so none is touched`,
      );
    }
    return carrying[0];
  }

  async returnStranded(req: StrandedRequest): Promise<string | undefined> {
    const mac = req.mac.toLowerCase();
    if (!mac) return undefined;
    const wns = await openWorkloadNetns(req.netnsPath, req.netnsInode);
    // Gone with its workload: a VF goes back to the initial namespace by itself.
    if (!wns) return undefined;
    const wsock = NetlinkSocket.openIn(wns);
    try {
      const host = await this.hostNs();
      // The host port's namespace is the host's: its VF is where the agent keeps it already.
      if (wns.inode === host.ns.inode) return undefined;
      const ours = (await listLinks(wsock)).filter(
        (l) => l.mac?.toLowerCase() === mac && endpointOfAlias(l.alias) !== undefined,
      );
      if (ours.length > 1) {
        throw failedPrecondition(
          `${ours.length} links in ${req.netnsPath} carry the port's MAC ${mac} and workloadnet's mark (${ours.map((l) => l.name).join(', ')}); which one is the port's cannot be told, so none is touched`,
        );
      }
      const link = ours[0];
      if (!link) return undefined;
      const endpoint = endpointOfAlias(link.alias) || returnName(link.index);
      await returnVf(endpoint, link.index, wsock, host.ns, this.log);
      // The name it got: its own, or returnName when the host holds another link of that name now.
      const back = await getLink(host.sock, { index: link.index });
      return back?.mac?.toLowerCase() === mac ? back.name : endpoint;
    } catch (err) {
      if (err instanceof NetlinkError && err.notFound) return undefined;
      throw netlinkFailure(`returning the VF of an attach cut short from ${req.netnsPath} to the host`, err);
    } finally {
      await wsock.close();
      wns.close();
    }
  }

  async inspect(req: InspectRequest, scope: CheckScope = 'full'): Promise<Drift[]> {
    if (scope === 'presence') return checkWorkloadPresence(req.netnsPath, req.netnsInode, req.ifName);
    return checkWorkloadNamespace(req.netnsPath, req.netnsInode, workloadInterface(req));
  }

  async hostLinkNames(): Promise<Set<string>> {
    const host = await this.hostNs();
    return new Set((await listLinks(host.sock)).map((l) => l.name));
  }

  async close(): Promise<void> {
    const host = this.host;
    this.host = undefined;
    if (!host) return;
    const h = await host.catch(() => undefined);
    await h?.sock.close();
    h?.ns.close();
  }
}
