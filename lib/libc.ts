// The few libc calls Node does not offer: setns(2), socket(2) for AF_NETLINK and raw ICMP, setsockopt(2),
// sendto(2), ioctl(2), close(2), getrlimit(2)/setrlimit(2). The one place the project binds libc, through koffi, whose npm package ships prebuilt
// binaries (no compiler at install time). The library is loaded on first use so that merely importing
// this module works on any platform.

import * as koffi from 'koffi';
import { errnoDescription, errnoName } from './errno';

export const AF_NETLINK = 16;
export const SOCK_RAW = 3;
export const SOCK_CLOEXEC = 0o2000000;
export const NETLINK_ROUTE = 0;
export const CLONE_NEWNET = 0x40000000;
/** _IO(0xb7, 0x3) from linux/nsfs.h: which kind of namespace an nsfs fd is (a CLONE_NEW* value). */
export const NS_GET_NSTYPE = 0xb703;

export const SOL_SOCKET = 1;
export const SO_SNDBUF = 7;
export const SO_RCVBUF = 8;
export const SO_RCVTIMEO = 20;
export const SO_RCVBUFFORCE = 33;

export const SOL_NETLINK = 270;
export const NETLINK_CAP_ACK = 10;
export const NETLINK_EXT_ACK = 11;
export const NETLINK_GET_STRICT_CHK = 12;

/** A failed system call, with the errno to branch on. */
export class SyscallError extends Error {
  readonly code: string;
  constructor(
    readonly syscall: string,
    readonly errno: number,
  ) {
    const code = errnoName(errno);
    const desc = errnoDescription(errno);
    super(`${syscall} failed: ${code}${desc ? ` (${desc})` : ''}`);
    this.name = 'SyscallError';
    this.code = code;
  }
}

interface Bindings {
  getrlimit: koffi.KoffiFunction;
  setrlimit: koffi.KoffiFunction;
  setns: koffi.KoffiFunction;
  socket: koffi.KoffiFunction;
  setsockopt: koffi.KoffiFunction;
  sendto: koffi.KoffiFunction;
  close: koffi.KoffiFunction;
  ioctl: koffi.KoffiFunction;
  gettid: koffi.KoffiFunction;
  setpriority: koffi.KoffiFunction;
}

let bindings: Bindings | undefined;

function libc(): Bindings {
  if (!bindings) {
    const lib = koffi.load('libc.so.6');
    // struct rlimit { rlim_t rlim_cur, rlim_max; } with a 64-bit rlim_t (64-bit Linux).
    koffi.struct('wn_rlimit', { cur: 'uint64_t', max: 'uint64_t' });
    bindings = {
      getrlimit: lib.func('int getrlimit(int resource, _Out_ wn_rlimit *rlim)'),
      setrlimit: lib.func('int setrlimit(int resource, const wn_rlimit *rlim)'),
      setns: lib.func('int setns(int fd, int nstype)'),
      socket: lib.func('int socket(int domain, int type, int protocol)'),
      setsockopt: lib.func(
        'int setsockopt(int fd, int level, int optname, const void *optval, uint32_t optlen)',
      ),
      sendto: lib.func(
        'intptr_t sendto(int fd, const void *buf, size_t len, int flags, const void *addr, uint32_t addrlen)',
      ),
      close: lib.func('int close(int fd)'),
      // Declared without the variadic argument: the requests we use take none.
      ioctl: lib.func('int ioctl(int fd, unsigned long request)'),
      gettid: lib.func('int gettid(void)'),
      setpriority: lib.func('int setpriority(int which, int who, int prio)'),
    };
  }
  return bindings;
}

function check(syscall: string, rc: unknown): number {
  const n = Number(rc);
  if (n < 0) throw new SyscallError(syscall, koffi.errno());
  return n;
}

/** Moves the calling thread into the namespace behind `fd`. */
export function setns(fd: number, nstype: number): void {
  check('setns', libc().setns(fd, nstype));
}

/** A new socket in the calling thread's current network namespace. */
export function socket(domain: number, type: number, protocol: number): number {
  return check('socket', libc().socket(domain, type, protocol));
}

export function setsockopt(fd: number, level: number, optname: number, value: Buffer): void {
  check(`setsockopt(${level}, ${optname})`, libc().setsockopt(fd, level, optname, value, value.length));
}

export function setsockoptInt(fd: number, level: number, optname: number, value: number): void {
  // An int in host byte order, as the kernel reads it.
  setsockopt(fd, level, optname, Buffer.from(new Int32Array([value]).buffer));
}

/** sendto(2) of one datagram to a sockaddr (already encoded); the bytes sent. */
export function sendTo(fd: number, data: Buffer, flags: number, address: Buffer): number {
  return check('sendto', libc().sendto(fd, data, data.length, flags, address, address.length));
}

/** ioctl without an argument, returning its non-negative result. */
export function ioctlNoArg(fd: number, request: number): number {
  return check('ioctl', libc().ioctl(fd, request));
}

/** Synchronous close, for failure paths where the fd was never handed to Node's fs. */
export function closeFd(fd: number): void {
  libc().close(fd);
}

/**
 * Sets the nice value of the calling thread only (Linux applies PRIO_PROCESS with a thread id to that
 * thread). Raising it needs no privilege.
 */
export function setThreadNice(nice: number): void {
  const PRIO_PROCESS = 0;
  check('setpriority', libc().setpriority(PRIO_PROCESS, check('gettid', libc().gettid()), nice));
}

export const RLIMIT_NOFILE = 7;

/** RLIM_INFINITY and anything past 2^53 count as "no limit" here. */
const rlimitNumber = (v: unknown): number => {
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : Number.MAX_SAFE_INTEGER;
};

/** getrlimit(2): the soft and hard limit of `resource`. */
export function getrlimit(resource: number): { soft: number; hard: number } {
  const out = { cur: 0, max: 0 };
  check(`getrlimit(${resource})`, libc().getrlimit(resource, out));
  return { soft: rlimitNumber(out.cur), hard: rlimitNumber(out.max) };
}

/**
 * Raises the soft limit of `resource` to its hard limit (setrlimit(2)). The hard limit is passed back
 * as read, not through a number: RLIM_INFINITY does not survive that trip.
 */
export function raiseSoftRlimit(resource: number): void {
  const out = { cur: 0, max: 0 };
  check(`getrlimit(${resource})`, libc().getrlimit(resource, out));
  check(`setrlimit(${resource})`, libc().setrlimit(resource, { cur: out.max, max: out.max }));
}
