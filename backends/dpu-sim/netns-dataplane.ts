import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import { writeSysctl } from '../../lib/netns/sysctl';
import {
  AF_INET,
  AF_INET6,
  IPV4_DEVCONF_FORWARDING,
  IPV4_DEVCONF_PROXY_ARP,
  IFA_F_NODAD,
  NetlinkError,
  delLinkRequest,
  delRouteRequest,
  getLink,
  listAddresses,
  listLinks,
  newAddressRequest,
  newRouteRequest,
  newVethRequest,
  setLinkRequest,
  NetlinkSocket,
  type Link,
} from '../../lib/rtnetlink';
import type { Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { Dataplane, FabricDataplane, Programmed } from './dataplane';
import { NetnsFabric } from './netns-fabric';
import { NetnsPolicy } from './netns-policy';
import type { PortEntry } from './port-table';
import { deleteRootQdiscRequest, replaceTbfRequest } from './tbf-qdisc';
import { adoptable, markedPort, representorMark, type AdoptedVf } from './vf-adoption';
import type { VfIdentity } from './vf-pool';

// A DPU made of a network namespace. Each port is a veth pair: the "VF" end appears in the host
// namespace (where the daemon moves it into the workload), the "representor" end stays in the DPU
// namespace. The DPU namespace routes between representors: a host route per workload address via
// its representor, forwarding on, and the workloads' link-local gateway owned by the namespace's
// loopback, so that every representor answers ARP for it (an address local to the namespace is
// answered on any interface). Traffic between two workloads therefore really enters and leaves the
// DPU namespace, as it would cross a SmartNIC's switch.
// With the fabric (protocol version 3) the namespace also runs the overlay between nodes: see
// netns-fabric.ts.

export interface NetnsDataplaneOptions {
  /** Name under /var/run/netns, or an absolute path. */
  dpuNetns: string;
  /** Namespace where VF ends appear; default this process's. */
  hostNetns?: string;
  /** Representors of the ports the simulator resumed from its state file; every other one is removed… */
  keepRepresentors: string[];
  /** …unless it carries the mark of `agentTag` and VFs are kept (vf-adoption.ts): then it is adopted. */
  keepVfs: boolean;
  /** The VF pool's tag: the representors' mark names it. */
  agentTag: string;
  /** Carry the fabric (a VXLAN device of its own); false: ports only. */
  fabric: boolean;
  /** The VTEP address to announce instead of the default-route interface's. */
  vtepAddress?: string;
  log: Logger;
}

/** Representors by VF ("rp<pf>v<vf>"), and by port name hash as earlier simulators named them. */
const REPRESENTOR = /^rp([0-9a-f]{8}|\d+v\d+)$/;

/** Interface names derived from the port name: stable, unique enough, within IFNAMSIZ. */
export function portNetdevNames(portName: string): { vf: string; representor: string } {
  const h = createHash('sha256').update(portName).digest('hex').slice(0, 8);
  return { vf: `vf${h}`, representor: `rp${h}` };
}

function isGone(err: unknown): boolean {
  return err instanceof NetlinkError && err.notFound;
}

export class NetnsDataplane implements Dataplane {
  readonly features = ['host-endpoint'];
  /** Gateway addresses already on the gateway device. */
  private readonly gateways = new Set<string>();
  private gatewayIndex = 0;
  fabric?: FabricDataplane;
  readonly policy: NetnsPolicy;
  /** VFs kept from an earlier start whose port has not been programmed again yet, by port name. */
  private readonly adoptedVfs = new Map<string, AdoptedVf>();

  private constructor(
    private readonly dpu: NetnsHandle,
    private readonly host: NetnsHandle,
    private readonly sock: NetlinkSocket,
    private readonly log: Logger,
    private readonly agentTag: string,
  ) {
    this.policy = new NetnsPolicy(dpu);
  }

  static async open(o: NetnsDataplaneOptions): Promise<NetnsDataplane> {
    const dpuPath = o.dpuNetns.startsWith('/') ? o.dpuNetns : `/var/run/netns/${o.dpuNetns}`;
    const dpu = await NetnsHandle.open(dpuPath);
    const host = o.hostNetns ? await NetnsHandle.open(o.hostNetns) : NetnsHandle.own();
    if (dpu.inode === host.inode) throw new Error('--dpu-netns and the host namespace must differ');
    if (dpu.isOwn) throw new Error("--dpu-netns must not be the simulator's own namespace");
    const dp = new NetnsDataplane(dpu, host, NetlinkSocket.openIn(dpu), o.log, o.agentTag);
    await dp.prepare();
    await dp.removeAllBut(new Set(o.keepRepresentors), o.keepVfs);
    if (o.fabric) dp.fabric = await NetnsFabric.open(dp.sock, o.log, o.vtepAddress);
    return dp;
  }

  /** Forwarding on and the loopback up, once per start. */
  private async prepare(): Promise<void> {
    await writeSysctl(this.dpu, 'net/ipv4/conf/all/forwarding', '1');
    try {
      await writeSysctl(this.dpu, 'net/ipv6/conf/all/forwarding', '1');
    } catch (err) {
      // A kernel booted without IPv6 has no such file; IPv4 still works.
      this.log.warn({ err: (err as Error).message }, 'IPv6 forwarding unavailable in the DPU namespace');
    }
    const lo = await getLink(this.sock, { name: 'lo' });
    if (!lo) throw new Error('the DPU namespace has no loopback');
    this.gatewayIndex = lo.index;
    if (!lo.up) await this.sock.request(setLinkRequest({ index: lo.index }, { up: true }));
    for (const a of await listAddresses(this.sock, { index: lo.index })) this.gateways.add(a.address);
  }

  /**
   * A DPU that lost its state (a new boot) starts empty: representors left by an earlier run that the
   * resumed table does not know are deleted, with their VFs. With `keepVfs` (the agent restarted, the
   * NIC did not) those carrying our mark are kept for their ports instead.
   */
  private async removeAllBut(keep: Set<string>, keepVfs: boolean): Promise<void> {
    for (const link of await listLinks(this.sock)) {
      if (!REPRESENTOR.test(link.name) || keep.has(link.name)) continue;
      const kept = keepVfs ? adoptable(this.agentTag, link) : undefined;
      if (kept && !this.adoptedVfs.has(kept.port)) {
        this.adoptedVfs.set(kept.port, kept);
        this.log.info({ representor: link.name, port: kept.port }, 'kept a VF left from an earlier start');
        continue;
      }
      await this.deleteLink(link.index);
      this.log.info({ representor: link.name }, 'removed a port left from an earlier boot');
    }
  }

  private async deleteLink(index: number): Promise<void> {
    await this.sock.request(delLinkRequest({ index })).catch((err: unknown) => {
      if (!isGone(err)) throw err;
    });
  }

  /** Deletes a kept VF's representor while it still carries the mark for its port (not a name reused). */
  private async removeMarked(a: AdoptedVf): Promise<void> {
    const link = await getLink(this.sock, { name: a.representor });
    if (link && markedPort(this.agentTag, link.alias) === a.port) await this.deleteLink(link.index);
  }

  /** VFs kept from an earlier start whose port has not been programmed again yet. */
  adopted(): AdoptedVf[] {
    return [...this.adoptedVfs.values()];
  }

  /**
   * Removes the kept VFs of ports not in `wanted` (a whole snapshot's: those ports are gone); the names
   * of the ports whose VF went.
   */
  async releaseAdopted(wanted: ReadonlySet<string>): Promise<string[]> {
    const gone: string[] = [];
    for (const a of [...this.adoptedVfs.values()]) {
      if (wanted.has(a.port)) continue;
      try {
        await this.removeMarked(a);
      } catch (err) {
        // Kept: the next whole snapshot tries again.
        this.log.warn(
          { representor: a.representor, err: (err as Error).message },
          'could not remove a kept VF',
        );
        continue;
      }
      this.adoptedVfs.delete(a.port);
      gone.push(a.port);
      this.log.info(
        { representor: a.representor, port: a.port },
        'removed a kept VF its port no longer wants',
      );
    }
    return gone;
  }

  /** Owning a workload's gateway address makes every representor answer ARP for it. */
  private async ensureGateway(address: string): Promise<void> {
    if (this.gateways.has(address) || address.startsWith('fe80:')) return;
    const v6 = address.includes(':');
    try {
      await this.sock.request(
        newAddressRequest({ index: this.gatewayIndex, address, prefixLength: v6 ? 128 : 32 }),
      );
    } catch (err) {
      if (!(err instanceof NetlinkError && err.code === 'EEXIST')) throw err;
    }
    this.gateways.add(address);
  }

  async program(port: Port, previous: PortEntry | undefined, vf: VfIdentity): Promise<Programmed> {
    const names = { vf: vf.netdev, representor: vf.representor };
    const rep = await this.representor(port, names);
    const index = rep.index;
    const alias = representorMark(this.agentTag, port.name);
    await this.sock.batchOrThrow([
      setLinkRequest({ index }, { mtu: port.mtu, up: true, ...(alias ? { alias } : {}) }),
      setLinkRequest({ index }, { inetConf: { [IPV4_DEVCONF_FORWARDING]: 1, [IPV4_DEVCONF_PROXY_ARP]: 1 } }),
    ]);
    for (const r of port.routes) if (r.gateway) await this.ensureGateway(r.gateway);
    // IPv6 has no proxy NDP for a link-local gateway: the representor holds fe80::1 itself, so that the
    // workload's default route via fe80::1 leads into the DPU.
    for (const r of port.routes) {
      if (!r.gateway.startsWith('fe80:')) continue;
      try {
        await this.sock.request(
          newAddressRequest({ index, address: r.gateway, prefixLength: 64, flags: IFA_F_NODAD }),
        );
      } catch (err) {
        if (!(err instanceof NetlinkError && err.code === 'EEXIST')) throw err;
      }
    }
    await this.applyRate(index, port, previous);
    await this.routeToWorkload(index, port, previous);
    this.log.debug(
      { port: port.name, representor: names.representor, vf: names.vf },
      'port plumbed in the DPU namespace',
    );
    return {
      endpoint: {
        netdev: names.vf,
        mac: port.mac,
        pfIndex: vf.pf,
        vfIndex: vf.vf,
        pciAddress: vf.pciAddress,
        representor: names.representor,
      },
      representor: names.representor,
    };
  }

  /**
   * The port's representor: the one there when it is this port's (or unmarked), else a new veth pair
   * whose VF end goes to the host namespace. A VF kept from an earlier start for this port is used in
   * place when it is this slot's, removed when the port was given another.
   */
  private async representor(port: Port, names: { vf: string; representor: string }): Promise<Link> {
    let rep = await getLink(this.sock, { name: names.representor });
    const markedFor = rep ? markedPort(this.agentTag, rep.alias) : undefined;
    if (rep && markedFor !== undefined && markedFor !== port.name) {
      // A VF kept for another port, whose slot that port left: its VF is no longer wanted.
      await this.deleteLink(rep.index);
      this.adoptedVfs.delete(markedFor);
      rep = undefined;
    }
    const kept = this.adoptedVfs.get(port.name);
    if (kept) {
      this.adoptedVfs.delete(port.name);
      if (rep && kept.representor === names.representor)
        this.log.info({ port: port.name, representor: names.representor }, 'programming a kept VF in place');
      // The port was given another VF (on another PF, or beyond the pool): the kept one is not its now.
      else await this.removeMarked(kept);
    }
    if (!rep) {
      await this.sock.request(
        newVethRequest({
          name: names.representor,
          mtu: port.mtu,
          up: true,
          peer: { name: names.vf, mtu: port.mtu, mac: port.mac, netnsFd: this.host.fd },
        }),
      );
      rep = await getLink(this.sock, { name: names.representor });
      if (!rep) throw new Error(`representor ${names.representor} vanished after creation`);
    }
    return rep;
  }

  /** Host routes to the workload through its representor; addresses the port no longer has lose theirs. */
  private async routeToWorkload(index: number, port: Port, previous: PortEntry | undefined): Promise<void> {
    const gone = (previous?.port.ips ?? []).filter((ip) => !port.ips.includes(ip));
    for (const cidr of gone) {
      await this.sock
        .request(
          delRouteRequest({ destination: cidr, family: cidr.includes(':') ? AF_INET6 : AF_INET, oif: index }),
        )
        .catch((err: unknown) => {
          if (!isGone(err)) throw err;
        });
    }
    if (port.ips.length) {
      await this.sock.batchOrThrow(
        port.ips.map((cidr) =>
          newRouteRequest(
            { destination: cidr, family: cidr.includes(':') ? AF_INET6 : AF_INET, oif: index },
            { replace: true },
          ),
        ),
      );
    }
  }

  /**
   * max_tx_rate as a tbf on the representor: traffic the DPU sends towards the VF is shaped there (a
   * veth pair has no other place a qdisc could hold it without a policer). No rate: the default qdisc.
   */
  private async applyRate(index: number, port: Port, previous: PortEntry | undefined): Promise<void> {
    const rate = port.qos?.maxTxRateMbps ?? 0;
    if (rate > 0) {
      await this.sock.request(replaceTbfRequest({ ifindex: index, rateMbps: rate }));
      return;
    }
    if (!previous?.port.qos?.maxTxRateMbps) return;
    await this.sock.request(deleteRootQdiscRequest(index)).catch((err: unknown) => {
      // Already the default: nothing to remove.
      if (!(err instanceof NetlinkError && (err.code === 'ENOENT' || err.code === 'EINVAL'))) throw err;
    });
  }

  async remove(entry: PortEntry): Promise<void> {
    // Deleting the representor deletes its VF too, wherever the daemon has moved it; routes go with it.
    const representor = entry.representor ?? portNetdevNames(entry.port.name).representor;
    try {
      await this.sock.request(delLinkRequest({ name: representor }));
    } catch (err) {
      if (!isGone(err)) throw err;
    }
  }

  async close(): Promise<void> {
    await this.policy.close();
    await this.sock.close();
    await this.dpu.close();
    await this.host.close();
  }
}
