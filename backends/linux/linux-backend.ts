// The Linux dataplane: routed, no bridge (the Calico model). Each attachment is a veth pair whose
// workload end is born inside the workload's namespace under the requested name and gets /32 (/128)
// addresses and a default route via a link-local gateway; the host end answers for that gateway
// (proxy ARP, or holding fe80::1 for IPv6) and a /32 (/128) route per address points at it.
//
// Every change goes through rtnetlink from this process (no `ip`, `sysctl` or `nsenter`), with the
// I/O on the libuv threadpool so that the event loop never waits for the kernel. One long-lived
// socket serves the host namespace for all concurrent operations (replies are matched by sequence
// number); each attach opens a short-lived socket inside its workload's namespace. Requests for one
// namespace are batched: an attach is three writes (create the pair; then the workload side and the
// host side concurrently), and a detach is one small write plus a share of a group delete.

import type {
  AttachSpec,
  AttachmentView,
  Backend,
  BackendHealth,
  DataplaneResult,
  Drift,
  ReconcileOutcome,
} from '../../core/backend';
import { WorkloadNetError, failedPrecondition, invalidArgument, type ErrorCode } from '../../core/errors';
import { planAttachment, randomMac, workloadRoutes, type AttachPlan } from './attach-plan';
import { GroupDeleter } from './group-deleter';
import { checkHostSide, hostSideRequests } from './host-side';
import { hostLinkAlias, hostLinkName, keyFromAlias } from './host-link-name';
import {
  resolveLinuxBackendOptions,
  type LinuxBackendOptions,
  type ResolvedLinuxBackendOptions,
} from './linux-backend-options';
import { NetnsHandle, NetnsOpenError, openNetlinkSocket } from './netns';
import { NetlinkError } from './rtnetlink/errors';
import { delLinkRequest, getLink, listLinks, setLinkRequest, type Link } from './rtnetlink/link';
import { delRouteRequest } from './rtnetlink/route';
import type { NetlinkSocket } from './rtnetlink/socket';
import { ensureSysctl, readSysctl } from './sysctl';
import { createVethPair, type VethPair } from './veth-pair';
import { checkWorkloadSide, workloadSideRequests } from './workload-side';

export type { LinuxBackendOptions } from './linux-backend-options';

const IPV4_FORWARD = 'net/ipv4/ip_forward';
const IPV6_FORWARD = 'net/ipv6/conf/all/forwarding';
const RECOMMENDED_THREADPOOL = 16;
/** Orphan deletes in flight at once: each costs ~20 ms in the kernel and holds a threadpool thread. */
const RECONCILE_DELETE_CONCURRENCY = 8;

interface HostContext {
  ns: NetnsHandle;
  sock: NetlinkSocket;
  deleter: GroupDeleter;
}

export class LinuxBackend implements Backend {
  readonly name = 'linux';
  private readonly opts: ResolvedLinuxBackendOptions;
  private host: Promise<HostContext> | undefined;
  private lastHealth: BackendHealth | undefined;
  private healthProbe: Promise<BackendHealth> | undefined;
  private healthAt = 0;

  constructor(opts: LinuxBackendOptions = {}) {
    this.opts = resolveLinuxBackendOptions(opts);
  }

  /** Opens the host namespace, checks privileges, enables forwarding there. */
  async start(): Promise<void> {
    const host = await this.hostContext();
    await this.enableForwarding(host);
    const threadpool = threadpoolSize();
    this.opts.logger.info(
      { hostNetns: host.ns.path, linkGroup: this.opts.linkGroup, ipv6: this.opts.ipv6, threadpool },
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

  async attach(spec: AttachSpec, planned?: DataplaneResult): Promise<DataplaneResult> {
    const host = await this.hostContext();
    const plan = planAttachment(spec, this.opts);
    if (plan.v6.length > 0 && !this.opts.ipv6) {
      this.opts.logger.warn(
        { key: spec.key },
        'IPv6 address attached but IPv6 forwarding was not enabled (ipv6 option)',
      );
    }
    const ns = await this.openWorkloadNetns(spec, host);
    let workload: NetlinkSocket | undefined;
    try {
      const sock = openNetlinkSocket(ns);
      workload = sock;
      const mac = planned?.mac ?? randomMac();
      const pair = await step(spec.key, 'creating the veth pair', () =>
        createVethPair(
          { host: host.sock, workload: sock, workloadNs: ns, logger: this.opts.logger },
          plan,
          mac,
        ),
      );
      try {
        await this.configureBothSides(host, sock, plan, pair, ns.path);
        // Last, so that a link with its alias is a complete attachment (see reconcile).
        await step(spec.key, `labelling host interface ${plan.hostName}`, () =>
          host.sock.request(setLinkRequest({ index: pair.hostIndex }, { alias: plan.alias })),
        );
      } catch (err) {
        await this.rollback(host, plan, pair);
        throw err;
      }
      return dataplaneResult(plan, mac, { hostIfIndex: pair.hostIndex, peerIfIndex: pair.peerIndex });
    } finally {
      // Closing never waits (see NetlinkSocket.close); the namespace fd is the caller's when borrowed.
      void workload?.close();
      void ns.close();
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
    const hostName = stringDetail(att, 'hostIfName') ?? plan.hostName;
    const hostIndex = numberDetail(att, 'hostIfIndex');
    // The host routes go with the link; deleting them first (matched on our ifindex, so never
    // someone else's route) keeps a link that refuses to die from still attracting the traffic.
    const routeDeletes =
      hostIndex === undefined
        ? []
        : [...plan.v4, ...plan.v6].map((a) =>
            delRouteRequest({ destination: `${a.address}/${a.prefixLength}`, oif: hostIndex }),
          );
    const outcomes = await host.sock.batch([
      ...routeDeletes,
      setLinkRequest({ name: hostName }, { group: this.opts.detachGroup, up: false }),
    ]);
    for (const o of outcomes) {
      // Already gone: the namespace was deleted (taking the pair with it), a previous detach
      // succeeded, or attach never got that far.
      if (!o.ok && !GONE.has(o.error.code))
        throw fromNetlink(o.error, `detach ${att.key}: taking ${hostName} down`);
    }
    if (!outcomes[outcomes.length - 1]?.ok) return;
    try {
      await host.deleter.flush();
    } catch (err) {
      // Something in the group cannot be deleted (put there by someone else?): delete ours alone.
      this.opts.logger.warn(
        { key: att.key, hostIf: hostName, group: this.opts.detachGroup, err: (err as Error).message },
        'group delete failed; deleting the link by itself',
      );
      const [alone] = await host.sock.batch([delLinkRequest({ name: hostName })]);
      if (alone && !alone.ok && !GONE.has(alone.error.code))
        throw fromNetlink(alone.error, `detach ${att.key}: deleting ${hostName}`);
    }
  }

  async check(att: AttachmentView): Promise<Drift[]> {
    const host = await this.hostContext();
    const plan = planAttachment(att, this.opts);
    const hostDrift = checkHostSide(host.sock, plan);
    // Awaited on every path below; this only keeps an early throw from leaving it unhandled.
    hostDrift.catch(() => undefined);
    let ns: NetnsHandle;
    try {
      ns = await NetnsHandle.open(att.netnsPath);
    } catch (err) {
      if (!(err instanceof NetnsOpenError)) throw err;
      return [
        {
          kind: 'netns-missing',
          message: `network namespace ${att.netnsPath} cannot be opened: ${err.message}`,
        },
        ...(await hostDrift),
      ];
    }
    try {
      if (ns.inode !== att.netnsInode) {
        return [
          {
            kind: 'netns-changed',
            message: `${att.netnsPath} now names another network namespace (inode ${ns.inode}, expected ${att.netnsInode})`,
          },
          ...(await hostDrift),
        ];
      }
      const sock = openNetlinkSocket(ns);
      try {
        const [h, w] = await Promise.all([hostDrift, checkWorkloadSide(sock, plan, att.dataplane?.mac)]);
        return [...w, ...h];
      } finally {
        void sock.close();
      }
    } finally {
      void ns.close();
    }
  }

  /**
   * One dump of the host namespace's links. Links in our group that no attachment accounts for are
   * deleted; attachments without their host link are reported missing, and so are those whose link
   * lacks its alias: the alias is written last, once both sides are configured, so a link without it
   * is an attach cut short (the core repairs it, which replaces the link). No per-attachment
   * requests, so it stays fast with thousands of attachments.
   */
  async reconcile(atts: AttachmentView[]): Promise<ReconcileOutcome> {
    const host = await this.hostContext();
    const outcome: ReconcileOutcome = { orphansRemoved: [], missing: [], healthy: [], warnings: [] };
    const links = await listLinks(host.sock);
    const ours = links.filter((l) => l.group === this.opts.linkGroup);
    const byName = new Map(ours.map((l) => [l.name, l]));
    const expected = new Set<string>();
    for (const att of atts) {
      const name = stringDetail(att, 'hostIfName') ?? hostLinkName(this.opts.hostIfPrefix, att.key);
      expected.add(name);
      const link = byName.get(name);
      if (!link) {
        outcome.missing.push(att.key);
        continue;
      }
      if (link.alias === hostLinkAlias(att.key)) {
        outcome.healthy.push(att.key);
        continue;
      }
      outcome.missing.push(att.key);
      const aliasKey = keyFromAlias(link.alias);
      if (aliasKey !== undefined && !att.key.startsWith(aliasKey)) {
        outcome.warnings.push(`host interface ${name} is labelled for ${aliasKey} but belongs to ${att.key}`);
      }
    }
    // Links in the detaching group were on their way out when the daemon stopped; orphans join them.
    const orphans = [
      ...links.filter((l) => l.group === this.opts.detachGroup),
      ...ours.filter((l) => !expected.has(l.name)),
    ];
    await this.deleteOrphans(host, orphans, outcome);
    if (outcome.orphansRemoved.length > 0) {
      this.opts.logger.info({ removed: outcome.orphansRemoved.length }, 'removed orphan host interfaces');
    }
    return outcome;
  }

  /**
   * Moves the orphans into the detaching group and deletes them with one request, so that thousands
   * of them take about as long as one; if that fails, they are deleted one by one.
   */
  private async deleteOrphans(host: HostContext, orphans: Link[], outcome: ReconcileOutcome): Promise<void> {
    if (orphans.length === 0) return;
    const label = (link: Link): string => `${link.name} (${link.alias ?? 'no alias'})`;
    const moved = await host.sock.batch(
      orphans.map((l) => setLinkRequest({ index: l.index }, { group: this.opts.detachGroup, up: false })),
    );
    const left: Link[] = [];
    orphans.forEach((link, i) => {
      const o = moved[i];
      if (o?.ok) left.push(link);
      else if (o && GONE.has(o.error.code)) outcome.orphansRemoved.push(label(link));
      else
        outcome.warnings.push(`could not remove orphan host interface ${label(link)}: ${o?.error.message}`);
    });
    try {
      await host.deleter.flush();
      outcome.orphansRemoved.push(...left.map(label));
      return;
    } catch (err) {
      this.opts.logger.warn(
        { err: (err as Error).message },
        'group delete failed; deleting orphans one by one',
      );
    }
    await forEachLimited(left, RECONCILE_DELETE_CONCURRENCY, async (link) => {
      try {
        await host.sock.request(delLinkRequest({ index: link.index }));
        outcome.orphansRemoved.push(label(link));
      } catch (err) {
        if (err instanceof NetlinkError && err.code === 'ENODEV') outcome.orphansRemoved.push(label(link));
        else
          outcome.warnings.push(
            `could not remove orphan host interface ${label(link)}: ${(err as Error).message}`,
          );
      }
    });
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
    const sysctls: Array<[string, string]> = [[IPV4_FORWARD, 'ipForward']];
    if (this.opts.ipv6) sysctls.push([IPV6_FORWARD, 'ipv6Forwarding']);
    for (const [path, name] of sysctls) {
      try {
        const v = await readSysctl(host.ns, path);
        details[name] = v === '1';
        if (v !== '1')
          reasons.push(
            `${path.replace(/\//g, '.')} is ${v} in ${host.ns.path}; workloads cannot reach anything`,
          );
      } catch (err) {
        reasons.push(`cannot read ${path.replace(/\//g, '.')}: ${(err as Error).message}`);
      }
    }
    return { ready: reasons.length === 0, reasons, details };
  }

  async stop(): Promise<void> {
    const pending = this.host;
    this.host = undefined;
    if (!pending) return;
    const host = await pending.catch(() => undefined);
    if (host) {
      await host.sock.close();
      await host.ns.close();
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
      if (err instanceof NetnsOpenError && err.reason === 'permission') throw needsRoot(`opening ${path}`);
      if (err instanceof WorkloadNetError)
        throw failedPrecondition(`linux backend: host namespace: ${err.message}`);
      throw err;
    }
    let sock: NetlinkSocket | undefined;
    try {
      sock = openNetlinkSocket(ns);
      // Reading links works unprivileged; an empty SETLINK on lo is the cheapest request that needs
      // CAP_NET_ADMIN, and changes nothing.
      const lo = await getLink(sock, { name: 'lo' });
      if (!lo) throw failedPrecondition(`linux backend: no loopback interface in ${ns.path}`);
      await sock.request(setLinkRequest({ index: lo.index }, {}));
      return { ns, sock, deleter: new GroupDeleter(sock, this.opts.detachGroup) };
    } catch (err) {
      void sock?.close();
      void ns.close();
      if (err instanceof NetlinkError && (err.code === 'EPERM' || err.code === 'EACCES'))
        throw needsRoot('netlink');
      if (
        err instanceof WorkloadNetError &&
        err.code === 'FAILED_PRECONDITION' &&
        /not allowed/.test(err.message)
      ) {
        throw needsRoot(`entering ${ns.path}`);
      }
      throw err;
    }
  }

  private async enableForwarding(host: HostContext): Promise<void> {
    const wanted = this.opts.ipv6 ? [IPV4_FORWARD, IPV6_FORWARD] : [IPV4_FORWARD];
    for (const path of wanted) {
      try {
        if (await ensureSysctl(host.ns, path, '1')) {
          this.opts.logger.info(
            { sysctl: path.replace(/\//g, '.'), netns: host.ns.path },
            'enabled forwarding',
          );
        }
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS')
          throw needsRoot(`writing /proc/sys/${path}`);
        throw failedPrecondition(
          `linux backend: cannot enable ${path.replace(/\//g, '.')}: ${(err as Error).message}`,
        );
      }
    }
  }

  /**
   * The spec's namespace: the fd the core validated when it hands one over, else the path opened
   * again. Refuses the wrong one: re-pointed since validation, or the host's.
   */
  private async openWorkloadNetns(spec: AttachSpec, host: HostContext): Promise<NetnsHandle> {
    const ns =
      spec.netnsFd === undefined
        ? await NetnsHandle.open(spec.netnsPath)
        : NetnsHandle.borrow(spec.netnsPath, spec.netnsFd, spec.netnsInode);
    let problem: string | undefined;
    if (ns.inode !== spec.netnsInode) {
      problem = `${spec.netnsPath} now names another network namespace (inode ${ns.inode}, validated ${spec.netnsInode}); retry with a fresh path`;
    } else if (ns.inode === host.ns.inode) {
      problem = `${spec.netnsPath} is the host network namespace; refusing to attach a workload to it`;
    } else if (ns.isOwn) {
      problem = `${spec.netnsPath} is the daemon's own network namespace; refusing to attach a workload to it`;
    }
    if (problem) {
      void ns.close();
      throw invalidArgument(problem);
    }
    return ns;
  }

  /** The workload side and the host side are independent once the pair exists: one write each, concurrently. */
  private async configureBothSides(
    host: HostContext,
    workload: NetlinkSocket,
    plan: AttachPlan,
    pair: VethPair,
    netnsPath: string,
  ): Promise<void> {
    const [w, h] = await Promise.allSettled([
      step(plan.key, `configuring ${plan.ifName} in ${netnsPath}`, () =>
        workload.batchOrThrow(workloadSideRequests(plan, pair.peerIndex)),
      ),
      step(plan.key, `configuring host interface ${plan.hostName}`, () =>
        host.sock.batchOrThrow(hostSideRequests(plan, pair.hostIndex)),
      ),
    ]);
    if (w.status === 'rejected') throw w.reason;
    if (h.status === 'rejected') throw h.reason;
  }

  /** Undo of createVethPair: deleting the host end removes both ends and everything on them. */
  private async rollback(host: HostContext, plan: AttachPlan, pair: VethPair): Promise<void> {
    try {
      await host.sock.request(delLinkRequest({ index: pair.hostIndex }));
    } catch (err) {
      if (err instanceof NetlinkError && err.code === 'ENODEV') return;
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
function dataplaneResult(
  plan: AttachPlan,
  mac: string,
  indexes: { hostIfIndex?: number; peerIfIndex?: number } = {},
): DataplaneResult {
  return {
    ifName: plan.ifName,
    mac,
    mtu: plan.mtu,
    hostIfName: plan.hostName,
    routes: workloadRoutes(plan),
    details: { ...indexes, hostIfName: plan.hostName, linkGroup: plan.linkGroup },
  };
}

const GONE = new Set(['ENODEV', 'ESRCH', 'ENOENT', 'EADDRNOTAVAIL']);

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

function stringDetail(att: AttachmentView, name: string): string | undefined {
  const v = att.dataplane?.details?.[name];
  return typeof v === 'string' && v !== '' ? v : undefined;
}

function numberDetail(att: AttachmentView, name: string): number | undefined {
  const v = att.dataplane?.details?.[name];
  return typeof v === 'number' && Number.isInteger(v) && v > 0 ? v : undefined;
}

async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
