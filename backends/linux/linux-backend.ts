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
// group delete. The threadpool path also runs an attach when the thread is off or gone, or when the
// host link's name is taken (it checks for a leftover and explains).

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
import {
  WorkloadNetError,
  failedPrecondition,
  invalidArgument,
  knownWorkloadNetError,
  type ErrorCode,
} from '../../core/errors';
import { NetnsError } from '../../lib/netns/netns-error';
import { NetnsHandle, type Netns } from '../../lib/netns/netns-handle';
import type { AttachStep } from './attach-exchange';
import { planAttachment, randomMac, type AttachPlan } from './attach-plan';
import { GroupDeleter } from './group-deleter';
import { HostForwarding } from './host-forwarding';
import { checkHostSide, hostSideRequests } from './host-side';
import { recordedHostIfName } from './host-link-name';
import { reconcileHostLinks } from './host-reconcile';
import {
  resolveLinuxBackendOptions,
  type LinuxBackendOptions,
  type ResolvedLinuxBackendOptions,
} from './linux-backend-options';
import { NetlinkThread } from './netlink-thread';
import { RestartingReader } from './restarting-reader';
import { NetlinkError, NetlinkSocketError } from '../../lib/rtnetlink/errors';
import { delLinkRequest, getLink, setLinkRequest } from '../../lib/rtnetlink/link';
import { NetlinkSocket } from '../../lib/rtnetlink/socket';
import { createVethPair, type VethPair } from './veth-pair';
import { setInterfaceMtu } from './interface-mtu';
import { LinuxFabric } from './fabric/linux-fabric';
import { EgressMasquerade } from './egress-masquerade';
import { nftRunner } from './fabric/nft-runner';
import {
  checkWorkloadNamespace,
  checkWorkloadPresence,
  workloadRoutes,
  workloadSideRequests,
} from '../interface/workload-side';

export type { LinuxBackendOptions } from './linux-backend-options';

const RECOMMENDED_THREADPOOL = 16;

interface HostContext {
  ns: NetnsHandle;
  sock: NetlinkSocket;
  deleter: GroupDeleter;
  forwarding: HostForwarding;
  /**
   * Runs attaches' netlink exchanges, started again whenever it ends; undefined when turned off. While
   * it is down, attaches take the threadpool path.
   */
  thread: RestartingReader<NetlinkThread> | undefined;
}

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

  constructor(opts: LinuxBackendOptions = {}) {
    this.opts = resolveLinuxBackendOptions(opts);
    this.fabric = new LinuxFabric({ hostNetnsPath: this.opts.hostNetnsPath, logger: this.opts.logger });
    this.egress = new EgressMasquerade(nftRunner({ netnsPath: this.opts.hostNetnsPath }));
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
    if (!thread?.alive) return this.attachOnThreadpool(host, spec, plan, planned);
    const r = await thread.attach({
      plan,
      mac: planned.mac,
      netnsFd: spec.netns.fd,
      netnsPath: spec.netnsPath,
      netnsInode: spec.netns.inode,
    });
    if (r.ok) return planned;
    if (r.pair) await this.rollback(host, plan, r.pair);
    const err = r.error;
    // A name already taken needs the leftover check and the explanation: the threadpool path has them.
    if (r.step === 'veth' && err instanceof NetlinkError && err.code === 'EEXIST')
      return this.attachOnThreadpool(host, spec, plan, planned);
    if (r.step === 'socket' || !(err instanceof NetlinkError)) throw err;
    throw fromNetlink(err, `attach ${spec.key}: ${stepDescription(r.step, plan, spec.netnsPath)}`);
  }

  /** The same exchange as the netlink thread's, each request through the libuv threadpool. */
  private async attachOnThreadpool(
    host: HostContext,
    spec: AttachSpec,
    plan: AttachPlan,
    planned: DataplaneResult,
  ): Promise<DataplaneResult> {
    const workload = NetlinkSocket.openIn(spec.netns);
    try {
      const pair = await step(spec.key, stepDescription('veth', plan, spec.netnsPath), () =>
        createVethPair(
          { host: host.sock, workload, workloadNs: spec.netns, logger: this.opts.logger },
          plan,
          planned.mac,
        ),
      );
      try {
        await this.configureBothSides(host, workload, plan, pair, spec.netnsPath);
        // Last, so that a link with its alias is a complete attachment (see reconcile).
        await step(spec.key, stepDescription('alias', plan, spec.netnsPath), () =>
          host.sock.request(setLinkRequest({ index: pair.hostIndex }, { alias: plan.alias })),
        );
      } catch (err) {
        await this.rollback(host, plan, pair);
        throw err;
      }
      return planned;
    } finally {
      // Closing never waits (see NetlinkSocket.close); the namespace is the core's to close.
      void workload.close();
    }
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
      const opening = this.openHost();
      this.host = opening;
      // A failed start may be retried (e.g. after fixing permissions).
      opening.catch(() => {
        if (this.host === opening) this.host = undefined;
      });
    }
    return this.host;
  }

  private async openHost(): Promise<HostContext> {
    const path = this.opts.hostNetnsPath;
    let ns: NetnsHandle;
    try {
      ns = path === undefined ? NetnsHandle.own() : await NetnsHandle.open(path);
    } catch (err) {
      if (err instanceof NetnsError && err.reason === 'permission') throw needsRoot(`opening ${path}`);
      const known = knownWorkloadNetError(err);
      if (known) throw failedPrecondition(`linux backend: host namespace: ${known.message}`);
      throw err;
    }
    let sock: NetlinkSocket | undefined;
    try {
      sock = NetlinkSocket.openIn(ns);
      // Reading links works unprivileged; an empty SETLINK on lo is the cheapest request that needs
      // CAP_NET_ADMIN, and changes nothing.
      const lo = await getLink(sock, { name: 'lo' });
      if (!lo) throw failedPrecondition(`linux backend: no loopback interface in ${ns.path}`);
      await sock.request(setLinkRequest({ index: lo.index }, {}));
      return {
        ns,
        sock,
        deleter: new GroupDeleter(sock, this.opts.detachGroup),
        forwarding: new HostForwarding(ns, this.opts.logger),
        thread: await this.startThread(ns),
      };
    } catch (err) {
      void sock?.close();
      ns.close();
      if (err instanceof NetlinkError && (err.code === 'EPERM' || err.code === 'EACCES'))
        throw needsRoot('netlink');
      if (err instanceof NetlinkSocketError && err.reason === 'permission')
        throw needsRoot(`entering ${ns.path}`);
      throw err;
    }
  }

  /**
   * The netlink thread, unless turned off. One that cannot start, or ends, is started again after a
   * back-off (restarting-reader.ts); attaches use the threadpool path meanwhile.
   */
  private async startThread(ns: NetnsHandle): Promise<RestartingReader<NetlinkThread> | undefined> {
    if (!this.opts.netlinkThread) return undefined;
    const thread = new RestartingReader({
      what: 'netlink thread',
      meanwhile: 'attaches use the threadpool (slower)',
      logger: this.opts.logger,
      start: (died) => NetlinkThread.start(ns, died),
    });
    await thread.begin();
    return thread;
  }

  /**
   * One write each side, the host side first: its end must go without a link-local address before the
   * workload end's up gives it a carrier (link-local.ts). A failure of the workload side is reported
   * first, as the netlink thread does.
   */
  private async configureBothSides(
    host: HostContext,
    workload: NetlinkSocket,
    plan: AttachPlan,
    pair: VethPair,
    netnsPath: string,
  ): Promise<void> {
    const hostFailure = await step(plan.key, stepDescription('host', plan, netnsPath), () =>
      host.sock.batchOrThrow(hostSideRequests(plan, pair.hostIndex)),
    ).then(
      () => undefined,
      (err: unknown) => ({ err }),
    );
    await step(plan.key, stepDescription('workload', plan, netnsPath), () =>
      workload.batchOrThrow(workloadSideRequests(plan, pair.peerIndex)),
    );
    if (hostFailure) throw hostFailure.err;
  }

  /** Undo of createVethPair: deleting the host end removes both ends and everything on them. */
  private async rollback(host: HostContext, plan: AttachPlan, pair: VethPair): Promise<void> {
    try {
      await host.sock.request(delLinkRequest({ index: pair.hostIndex }));
    } catch (err) {
      if (err instanceof NetlinkError && err.notFound) return;
      // The link is in our group with no attachment, so the next reconcile removes it.
      this.opts.logger.error(
        { key: plan.key, hostIf: plan.hostName, err: (err as Error).message },
        'rollback failed',
      );
    }
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

/** What an attach was doing at `step`, as its errors say. */
function stepDescription(step: AttachStep, plan: AttachPlan, netnsPath: string): string {
  switch (step) {
    case 'socket':
      return `opening a netlink socket in ${netnsPath}`;
    case 'veth':
      return 'creating the veth pair';
    case 'workload':
      return `configuring ${plan.ifName} in ${netnsPath}`;
    case 'host':
      return `configuring host interface ${plan.hostName}`;
    case 'alias':
      return `labelling host interface ${plan.hostName}`;
  }
}

/** Runs one named step; kernel errors become WorkloadNetErrors that say what was being done. */
async function step<T>(key: string, what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof NetlinkError) throw fromNetlink(err, `attach ${key}: ${what}`);
    throw err;
  }
}

function fromNetlink(err: NetlinkError, context: string): WorkloadNetError {
  const codes: Record<string, ErrorCode> = {
    EPERM: 'FAILED_PRECONDITION',
    EACCES: 'FAILED_PRECONDITION',
    ENOBUFS: 'UNAVAILABLE',
    ENOMEM: 'RESOURCE_EXHAUSTED',
    ETIMEDOUT: 'UNAVAILABLE',
    EBUSY: 'UNAVAILABLE',
  };
  const code = codes[err.code] ?? 'INTERNAL';
  return new WorkloadNetError(code, `${context}: ${err.message}`, code === 'UNAVAILABLE');
}

function threadpoolSize(): number {
  const n = Number(process.env.UV_THREADPOOL_SIZE);
  return Number.isInteger(n) && n > 0 ? n : 4;
}

function needsRoot(what: string): WorkloadNetError {
  return failedPrecondition(
    `linux backend: permission denied (${what}); run workloadnetd as root or with CAP_NET_ADMIN and CAP_SYS_ADMIN`,
  );
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
