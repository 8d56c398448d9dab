// Options of the Linux backend and their defaults, checked once at construction so that a bad value
// fails the daemon's start-up instead of the first Attach.

import * as net from 'node:net';
import { invalidArgument } from '../../core/errors';

/** The few logging calls the backend makes; a pino logger fits. */
export interface LinuxBackendLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

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
  /** Prefix of host interface names (prefix + 11 hex digits of sha1(key)). Default "wn". */
  hostIfPrefix?: string;
  /** Gateway used when an IPv4 assignment names none; answered by proxy ARP. Default 169.254.1.1. */
  gatewayV4?: string;
  /** Gateway used when an IPv6 assignment names none; put on every host end. Default fe80::1. */
  gatewayV6?: string;
  /** Also enable IPv6 forwarding at start (dual-stack pools). Default false. */
  ipv6?: boolean;
  logger?: LinuxBackendLogger;
}

export interface ResolvedLinuxBackendOptions {
  hostNetnsPath: string | undefined;
  linkGroup: number;
  detachGroup: number;
  hostIfPrefix: string;
  gatewayV4: string;
  gatewayV6: string;
  ipv6: boolean;
  logger: LinuxBackendLogger;
}

export const DEFAULT_LINK_GROUP = 0x776e;
export const DEFAULT_DETACH_GROUP = 0x776f;
/** 4 bytes of prefix + 11 hex digits = 15, the longest interface name Linux allows. */
export const MAX_HOST_IF_PREFIX = 4;

const silent: LinuxBackendLogger = { info: () => undefined, warn: () => undefined, error: () => undefined };

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
  const hostIfPrefix = opts.hostIfPrefix ?? 'wn';
  if (!/^[a-z][a-z0-9-]*$/.test(hostIfPrefix) || hostIfPrefix.length > MAX_HOST_IF_PREFIX) {
    throw invalidArgument(
      `linux backend: hostIfPrefix "${hostIfPrefix}" must be 1-${MAX_HOST_IF_PREFIX} lowercase letters, digits or "-", starting with a letter`,
    );
  }
  const gatewayV4 = opts.gatewayV4 ?? '169.254.1.1';
  if (net.isIPv4(gatewayV4) === false)
    throw invalidArgument(`linux backend: gatewayV4 "${gatewayV4}" is not an IPv4 address`);
  const gatewayV6 = opts.gatewayV6 ?? 'fe80::1';
  if (net.isIPv6(gatewayV6) === false)
    throw invalidArgument(`linux backend: gatewayV6 "${gatewayV6}" is not an IPv6 address`);
  const hostNetnsPath = opts.hostNetnsPath === '' ? undefined : opts.hostNetnsPath;
  if (hostNetnsPath !== undefined && !hostNetnsPath.startsWith('/')) {
    throw invalidArgument(`linux backend: hostNetnsPath "${hostNetnsPath}" must be an absolute path`);
  }
  return {
    hostNetnsPath,
    linkGroup,
    detachGroup,
    hostIfPrefix,
    gatewayV4,
    gatewayV6,
    ipv6: opts.ipv6 ?? false,
    logger: opts.logger ?? silent,
  };
}
