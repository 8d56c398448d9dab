// IP forwarding in the node's namespace, per family: the host ends of the veth pairs route the pods'
// packets, so without it pods reach nothing beyond their node. A family is touched only once this
// backend's networks have a range of it (IPv4 from the start; IPv6 when a pool of it exists, which a
// Kubernetes Node or an etcd block may supply long after start), because turning IPv6 forwarding on
// also makes a host stop taking its own IPv6 route from router adverts.
//
// Where /proc/sys cannot be written (an unprivileged container sees it read-only) the value is read
// instead: already 1, nothing is missing; anything else leaves the daemon running but not ready, its
// Status and log naming the sysctl, its value and how to set it. Asking for root would be wrong there:
// the operator sets it on the node or from a privileged init container.

import type { Logger } from '../../core/logger';
import type { Netns } from '../../lib/netns/netns-handle';
import { readSysctl, writeSysctl, type SysctlPath } from '../../lib/netns/sysctl';

export type IpFamily = 4 | 6;

const SYSCTL: Record<IpFamily, SysctlPath> = {
  4: 'net/ipv4/ip_forward',
  6: 'net/ipv6/conf/all/forwarding',
};
/** Backend health details' keys. */
const DETAIL: Record<IpFamily, string> = { 4: 'ipForward', 6: 'ipv6Forwarding' };
/** What opening a /proc/sys file for writing fails with where the daemon may not write it. */
const NOT_WRITABLE = new Set(['EROFS', 'EACCES', 'EPERM']);

export class HostForwarding {
  /** Each family's one attempt to turn forwarding on; a family asked for once is checked from then on. */
  private readonly turnedOn = new Map<IpFamily, Promise<void>>();
  /** Families whose sysctl the daemon could not set, and why. */
  private readonly unset = new Map<IpFamily, 'read-only' | 'failed'>();

  constructor(
    private readonly ns: Netns & { readonly path: string },
    private readonly log: Logger,
  ) {}

  /**
   * Turns forwarding of `family` on, once (`again`: once more, as a start does): writes 1 when it reads
   * otherwise. Never throws: a value it can neither find right nor set is logged here and reported by
   * check().
   */
  ensure(family: IpFamily, again = false): Promise<void> {
    let once = again ? undefined : this.turnedOn.get(family);
    if (!once) {
      once = this.turnOn(family);
      this.turnedOn.set(family, once);
    }
    return once;
  }

  /**
   * Why pods of `families` (and of any family turned on before) cannot be forwarded now, read afresh
   * each time (an operator may set a value at any moment); fills `details` with each family's state.
   * A family asked for here the first time is turned on first.
   */
  async check(
    families: readonly IpFamily[],
    details: Record<string, boolean | string | number>,
  ): Promise<string[]> {
    const reasons: string[] = [];
    for (const family of [4, 6] as const) {
      if (!families.includes(family) && !this.turnedOn.has(family)) continue;
      await this.ensure(family);
      const name = dotted(SYSCTL[family]);
      let value: string;
      try {
        value = await readSysctl(this.ns, SYSCTL[family]);
      } catch (err) {
        reasons.push(`cannot read ${name} in ${this.ns.path}: ${(err as Error).message}`);
        continue;
      }
      details[DETAIL[family]] = value === '1';
      if (value !== '1') reasons.push(this.advice(family, value));
    }
    return reasons;
  }

  private async turnOn(family: IpFamily): Promise<void> {
    const path = SYSCTL[family];
    const fields = { sysctl: dotted(path), netns: this.ns.path };
    let value: string;
    try {
      value = await readSysctl(this.ns, path);
    } catch (err) {
      this.log.error({ ...fields, err: (err as Error).message }, `cannot read ${dotted(path)}`);
      return;
    }
    if (value === '1') return;
    try {
      await writeSysctl(this.ns, path, '1');
      this.log.info(fields, 'enabled forwarding');
    } catch (err) {
      if (NOT_WRITABLE.has((err as NodeJS.ErrnoException).code ?? '')) {
        this.unset.set(family, 'read-only');
        this.log.error({ ...fields, value }, this.advice(family, value));
      } else {
        this.unset.set(family, 'failed');
        this.log.error(
          { ...fields, value, err: (err as Error).message },
          `cannot enable ${dotted(path)}: ${(err as Error).message}`,
        );
      }
    }
  }

  /** The words Status and the log give a family whose forwarding is off. */
  private advice(family: IpFamily, value: string): string {
    const name = dotted(SYSCTL[family]);
    const pods = family === 4 ? 'pods' : "pods' IPv6 traffic";
    const why = {
      'read-only': '; the daemon cannot write /proc/sys here (read-only)',
      failed: '; the daemon could not set it (see its log)',
      none: ' (turned off after the daemon enabled it)',
    }[this.unset.get(family) ?? 'none'];
    return (
      `${name} is ${value} in ${this.ns.path}${why}: ${pods} cannot leave this node until it is 1. ` +
      `Set it on the node (sysctl -w ${name}=1, and a file in /etc/sysctl.d/ to keep it) ` +
      'or from a privileged init container'
    );
  }
}

/** "net/ipv4/ip_forward" as sysctl(8) names it: "net.ipv4.ip_forward". */
function dotted(path: SysctlPath): string {
  return path.replace(/\//g, '.');
}
