// Options of the Linux backend and their defaults, checked once at construction so that a bad value
// fails the daemon's start-up instead of the first Attach.

import { invalidArgument } from '../../core/errors';
import { silentLogger, type Logger } from '../../core/logger';

export interface LinuxBackendOptions {
  /**
   * Network namespace facing the workloads (where host veth ends, routes and forwarding live).
   * Default: the process's own namespace. Tests pass a test-owned "node" namespace.
   */
  hostNetnsPath?: string;
  /** Link group marking host interfaces we created, so orphans are recognisable. Default 0x776e ("wn"). */
  linkGroup?: number;
  /**
   * Link group that host interfaces pass through on their way out: detach moves a link there and one
   * request deletes the whole group. Must hold nothing else. Default 0x776f.
   */
  detachGroup?: number;
  /**
   * Whether the networks of this backend have an IPv6 range: IPv6 forwarding is turned on once this
   * says yes (see host-forwarding.ts). A function is asked again on every health probe, for ranges a
   * pool source supplies after start. Default false; an IPv6 attach turns it on in any case.
   */
  ipv6?: boolean | (() => boolean);
  /**
   * Keep the kernel's IPv6 link-local address on both ends of a link that has no IPv6 address of
   * ours. Default false: such links get none (see link-local.ts).
   */
  ipv6LinkLocal?: boolean;
  /**
   * Run each attach's netlink exchange on a dedicated worker thread (one message each way) instead of
   * one libuv threadpool hop per write and per reply. Default true; false is for comparison.
   */
  netlinkThread?: boolean;
  logger?: Logger;
}

export interface ResolvedLinuxBackendOptions {
  hostNetnsPath: string | undefined;
  linkGroup: number;
  detachGroup: number;
  ipv6: () => boolean;
  ipv6LinkLocal: boolean;
  netlinkThread: boolean;
  logger: Logger;
}

export const DEFAULT_LINK_GROUP = 0x776e;
export const DEFAULT_DETACH_GROUP = 0x776f;

export function resolveLinuxBackendOptions(opts: LinuxBackendOptions): ResolvedLinuxBackendOptions {
  const linkGroup = opts.linkGroup ?? DEFAULT_LINK_GROUP;
  // Group 0 is the default group of every interface: using it would make every link look like ours.
  if (!Number.isInteger(linkGroup) || linkGroup < 1 || linkGroup > 0xffffffff) {
    throw invalidArgument(`linux backend: linkGroup must be an integer in 1..4294967295, not ${linkGroup}`);
  }
  const detachGroup = opts.detachGroup ?? DEFAULT_DETACH_GROUP;
  if (
    !Number.isInteger(detachGroup) ||
    detachGroup < 1 ||
    detachGroup > 0xffffffff ||
    detachGroup === linkGroup
  ) {
    throw invalidArgument(
      `linux backend: detachGroup must be an integer in 1..4294967295 other than linkGroup, not ${detachGroup}`,
    );
  }
  const hostNetnsPath = opts.hostNetnsPath === '' ? undefined : opts.hostNetnsPath;
  if (hostNetnsPath !== undefined && !hostNetnsPath.startsWith('/')) {
    throw invalidArgument(`linux backend: hostNetnsPath "${hostNetnsPath}" must be an absolute path`);
  }
  return {
    hostNetnsPath,
    linkGroup,
    detachGroup,
    ipv6: typeof opts.ipv6 === 'function' ? opts.ipv6 : constant(opts.ipv6 ?? false),
    ipv6LinkLocal: opts.ipv6LinkLocal ?? false,
    netlinkThread: opts.netlinkThread ?? true,
    logger: opts.logger ?? silentLogger(),
  };
}

function constant(value: boolean): () => boolean {
  return () => value;
}
