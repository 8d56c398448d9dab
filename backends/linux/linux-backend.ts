// The Linux dataplane: routed, no bridge (the Calico model). Each attachment is a veth pair whose
// workload end is born inside the workload's namespace under the requested name and gets /32 (/128)
// addresses and a default route via a link-local gateway; the host end answers for that gateway
// (proxy ARP, or holding fe80::1 for IPv6) and a /32 (/128) route per address points at it.
//
// Every change goes through rtnetlink from this process (no `ip`, `sysctl` or `nsenter`), and the
// event loop never waits for the kernel. An attach's whole exchange runs on the netlink thread
// (netlink-thread.ts): one message there and one back, the thread's own host socket, a short-lived
// socket inside the workload's namespace, four writes (create the pair, the workload side, the host
// side, the alias). Everything else uses one long-lived host socket whose I/O is on the libuv
// threadpool (replies matched by sequence number): a detach is one small write plus a share of a
// group delete. The threadpool path (threadpool-attach.ts) also runs an attach when the thread is off
// or gone, or when the host link's name is taken (it checks for a leftover and explains).

import type {
  AttachSpec,
  AttachmentView,
  Backend,
  BackendHealth,
  CheckScope,
  DataplaneResult,
  Drift,
  ReconcileOptions,
  ReconcileOutcome,
} from '../../core/backend';
import { invalidArgument } from '../../core/errors';
import type { Netns } from '../../lib/netns/netns-handle';
import { fromNetlink, stepDescription } from './attach-errors';
import { planAttachment, randomMac, type AttachPlan } from './attach-plan';
import { checkHostSide } from './host-side';
import { openHostContext, type HostContext } from './host-context';
import { recordedHostIfName } from './host-link-name';
import { reconcileHostLinks } from './host-reconcile';
import {
  resolveLinuxBackendOptions,
  type LinuxBackendOptions,
  type ResolvedLinuxBackendOptions,
} from './linux-backend-options';
import { NetlinkError } from '../../lib/rtnetlink/errors';
import { delLinkRequest, getLink, setLinkRequest } from '../../lib/rtnetlink/link';
import { NetlinkSocket } from '../../lib/rtnetlink/socket';
import { attachOnThreadpool } from './threadpool-attach';
import { rollbackVethPair } from './veth-pair';
import { setInterfaceMtu } from './interface-mtu';
import { LinuxFabric } from './fabric/linux-fabric';
import { EgressMasquerade } from './egress-masquerade';
import { HostPolicy } from './policy/host-policy';
import { nftRunner } from './fabric/nft-runner';
import { checkWorkloadNamespace, checkWorkloadPresence, workloadRoutes } from '../interface/workload-side';

export type { LinuxBackendOptions } from './linux-backend-options';

const RECOMMENDED_THREADPOOL = 16;

export class LinuxBackend implements Backend {
  readonly name = 'linux';
  private readonly opts: ResolvedLinuxBackendOptions;
  private host: Promise<HostContext> | undefined;
  private lastHealth: BackendHealth | undefined;
  private healthProbe: Promise<BackendHealth> | undefined;
  private healthAt = 0;
  /** Routes and VXLAN to other nodes, in the same host namespace (core/fabric drives it). */
  readonly fabric: LinuxFabric;
  /** Pods' traffic leaving the cluster, masqueraded in the host namespace (core/egress drives it). */
  readonly egress: EgressMasquerade;
  /** NetworkPolicy for its pods, in nftables in the host namespace (core/policy drives it). */
  readonly policy: HostPolicy;

  constructor(opts: LinuxBackendOptions = {}) {
    this.opts = resolveLinuxBackendOptions(opts);
    this.fabric = new LinuxFabric({ hostNetnsPath: this.opts.hostNetnsPath, logger: this.opts.logger });
    this.egress = new EgressMasquerade(nftRunner({ netnsPath: this.opts.hostNetnsPath }));
    this.policy = new HostPolicy(this.opts.hostNetnsPath, { logger: this.opts.logger });
  }

  /**
   * Opens the host namespace, checks privileges, enables forwarding there for the families the
   * networks have ranges of (one it cannot set leaves the backend not ready, see host-forwarding.ts).
   */
  async start(): Promise<void> {
    const host = await this.hostContext();
    const ipv6 = this.opts.ipv6();
    await host.forwarding.ensure(4, true);
    if (ipv6) await host.forwarding.ensure(6, true);
    const threadpool = threadpoolSize();
    this.opts.logger.info(
      { hostNetns: host.ns.path, linkGroup: this.opts.linkGroup, ipv6, threadpool },
      'linux backend ready',
    );
    if (threadpool < RECOMMENDED_THREADPOOL) {
      // A veth delete sleeps ~20 ms in the kernel inside write(), holding a threadpool thread; with
      // the default 4 threads parallel detaches top out near 100/s (about 400/s with 16).
      this.opts.logger.warn(
        { threadpool, recommended: RECOMMENDED_THREADPOOL },
        'small libuv threadpool limits parallel detach; set UV_THREADPOOL_SIZE before the daemon starts',
      );
    }
  }

  /**
   * Everything attach reports is decided up front: the names come from the key, the MAC is chosen
   * here rather than by the kernel. So the core can record the attachment while it is programmed.
   */
  plan(spec: AttachSpec): DataplaneResult {
    return dataplaneResult(planAttachment(spec, this.opts), randomMac());
  }

  /**
   * Like ptp's cmdAdd: create the pair (the workload end born in the workload's namespace), configure
   * both ends at once, label the host end last. Every failure after the pair exists deletes it.
   */
  async attach(spec: AttachSpec, planned: DataplaneResult): Promise<DataplaneResult> {
    const host = await this.hostContext();
    const plan = planAttachment(spec, this.opts);
    // Once, before the first IPv6 address: the range it came from may be newer than the last probe.
    if (plan.v6.length > 0) await host.forwarding.ensure(6);
    refuseHostNamespace(spec, host.ns);
    const thread = host.thread?.current;
    if (!thread?.alive) return attachOnThreadpool(host.sock, spec, plan, planned, this.opts.logger);
    const r = await thread.attach({
      plan,
      mac: planned.mac,
      netnsFd: spec.netns.fd,
      netnsPath: spec.netnsPath,
      netnsInode: spec.netns.inode,
    });
    if (r.ok) return planned;
    if (r.pair) await rollbackVethPair(host.sock, plan, r.pair, this.opts.logger);
    const err = r.error;
    // A name already taken needs the leftover check and the explanation: the threadpool path has them.
    if (r.step === 'veth' && err instanceof NetlinkError && err.code === 'EEXIST')
      return attachOnThreadpool(host.sock, spec, plan, planned, this.opts.logger);
    if (r.step === 'socket' || !(err instanceof NetlinkError)) throw err;
    throw fromNetlink(err, `attach ${spec.key}: ${stepDescription(r.step, plan, spec.netnsPath)}`);
  }

  /**
   * Deletes the host end, which deletes the pair (and with it every address and route on either
   * end). Needs no access to the workload namespace, so a vanished namespace changes nothing. The
   * link is taken down and moved into the detaching group, then deleted together with whatever other
   * detaches gathered there meanwhile (see group-deleter.ts).
   */
  async detach(att: AttachmentView): Promise<void> {
    const host = await this.hostContext();
    const plan = planAttachment(att, this.opts);
    const hostName = recordedHostIfName(att) ?? plan.hostName;
    // Taking the link down withdraws its host routes at once, so a link that refuses to die no longer
    // attracts the workload's traffic.
    const [down] = await host.sock.batch([
      setLinkRequest({ name: hostName }, { group: this.opts.detachGroup, up: false }),
    ]);
    if (down && !down.ok) {
      // Already gone: the namespace was deleted (taking the pair with it), a previous detach
      // succeeded, or attach never got that far.
      if (down.error.notFound) return;
      throw fromNetlink(down.error, `detach ${att.key}: taking ${hostName} down`);
    }
    try {
      await host.deleter.flush();
    } catch (err) {
      // Something in the group cannot be deleted (put there by someone else?): delete ours alone.
      this.opts.logger.warn(
        { key: att.key, hostIf: hostName, group: this.opts.detachGroup, err: (err as Error).message },
        'group delete failed; deleting the link by itself',
      );
      const [alone] = await host.sock.batch([delLinkRequest({ name: hostName })]);
      if (alone && !alone.ok && !alone.error.notFound)
        throw fromNetlink(alone.error, `detach ${att.key}: deleting ${hostName}`);
    }
  }

  async check(att: AttachmentView, scope: CheckScope = 'full'): Promise<Drift[]> {
    if (scope === 'presence') return checkWorkloadPresence(att.netnsPath, att.netnsInode, att.ifName);
    const host = await this.hostContext();
    const plan = planAttachment(att, this.opts);
    const [hostDrift, workloadDrift] = await Promise.all([
      checkHostSide(host.sock, plan),
      checkWorkloadNamespace(att.netnsPath, att.netnsInode, plan, att.dataplane?.mac),
    ]);
    return [...workloadDrift, ...hostDrift];
  }

  /** See interface-mtu.ts. */
  async setMtu(att: AttachmentView, netns: Netns, mtu: number): Promise<void> {
    const host = await this.hostContext();
    refuseHostNamespace({ ...att, netns }, host.ns);
    const plan = planAttachment(att, this.opts);
    const hostName = recordedHostIfName(att) ?? plan.hostName;
    const workload = NetlinkSocket.openIn(netns);
    try {
      const change = await setInterfaceMtu({ host: host.sock, workload }, plan, hostName, mtu);
      if (change.before !== mtu || change.routes > 0)
        this.opts.logger.info(
          { key: att.key, hostIf: hostName, from: change.before, to: mtu, routes: change.routes },
          'interface MTU changed in place',
        );
    } catch (err) {
      if (err instanceof NetlinkError) throw fromNetlink(err, `${att.key}: setting MTU ${mtu}`);
      throw err;
    } finally {
      void workload.close();
    }
  }

  /** See host-reconcile.ts. */
  async reconcile(
    atts: AttachmentView[],
    opts: ReconcileOptions = { storeIsNew: false },
  ): Promise<ReconcileOutcome> {
    return reconcileHostLinks(await this.hostContext(), atts, opts, this.opts);
  }

  /**
   * Status is asked for often (health probes, the daemon's readiness refresh) and must answer at once
   * even while hundreds of attaches keep the threadpool busy; the probe itself goes through that pool.
   * So the last result is served while a fresh one is fetched in the background once it is a second
   * old. The very first call waits for a real probe.
   */
  async health(): Promise<BackendHealth> {
    const now = Date.now();
    if (!this.healthProbe || now - this.healthAt > HEALTH_MAX_AGE_MS) {
      this.healthAt = now;
      const probe = this.probeHealth();
      const first = !this.lastHealth;
      this.healthProbe = probe.then((h) => (this.lastHealth = h));
      if (first) return this.healthProbe;
    }
    return this.lastHealth ?? this.healthProbe;
  }

  private async probeHealth(): Promise<BackendHealth> {
    const reasons: string[] = [];
    const details: Record<string, string | number | boolean> = {
      hostNetns: this.opts.hostNetnsPath ?? '(own)',
      linkGroup: this.opts.linkGroup,
      threadpool: threadpoolSize(),
      ...this.egress.describe(),
    };
    let host: HostContext;
    try {
      host = await this.hostContext();
    } catch (err) {
      return { ready: false, reasons: [`netlink unreachable: ${(err as Error).message}`], details };
    }
    try {
      const lo = await getLink(host.sock, { name: 'lo' });
      if (!lo) reasons.push(`no loopback interface in ${host.ns.path}`);
    } catch (err) {
      reasons.push(`netlink unreachable: ${(err as Error).message}`);
    }
    reasons.push(...(await host.forwarding.check(this.opts.ipv6() ? [4, 6] : [4], details)));
    // Attaches still work meanwhile (on the threadpool): a detail, not a reason.
    const threadDown = host.thread?.down();
    if (threadDown !== undefined) details.netlinkThread = threadDown;
    return { ready: reasons.length === 0, reasons, details };
  }

  async stop(): Promise<void> {
    await this.policy.close();
    const pending = this.host;
    this.host = undefined;
    if (!pending) return;
    const host = await pending.catch(() => undefined);
    if (host) {
      await host.thread?.stop();
      await host.sock.close();
      host.ns.close();
    }
  }

  // ---- steps ----

  /** The host namespace and its socket, opened once; a privilege problem fails here with one clear line. */
  private hostContext(): Promise<HostContext> {
    if (!this.host) {
      const opening = openHostContext(this.opts);
      this.host = opening;
      // A failed start may be retried (e.g. after fixing permissions).
      opening.catch(() => {
        if (this.host === opening) this.host = undefined;
      });
    }
    return this.host;
  }
}

const HEALTH_MAX_AGE_MS = 1000;

/** What attach reports (and plan predicts): all of it follows from the plan and the chosen MAC. */
function dataplaneResult(plan: AttachPlan, mac: string): DataplaneResult {
  return {
    ifName: plan.ifName,
    mac,
    mtu: plan.mtu,
    hostIfName: plan.hostName,
    routes: workloadRoutes(plan),
    details: { hostIfName: plan.hostName, linkGroup: plan.linkGroup },
  };
}

function threadpoolSize(): number {
  const n = Number(process.env.UV_THREADPOOL_SIZE);
  return Number.isInteger(n) && n > 0 ? n : 4;
}

/**
 * The core refuses the daemon's own and the host's namespace; the node namespace this backend serves
 * (--host-netns) is one only this backend knows, so it refuses that one itself.
 */
function refuseHostNamespace(spec: AttachSpec, hostNs: Netns): void {
  if (spec.netns.inode === hostNs.inode) {
    throw invalidArgument(
      `${spec.netnsPath} is the host network namespace; refusing to attach a workload to it`,
    );
  }
}
