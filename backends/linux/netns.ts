// Network namespace handles, and the two things we do *inside* a namespace: create a netlink socket
// and open a /proc/sys file. Both objects stay bound to the namespace they were created in, so we
// only need to be inside it for the one system call:
//
//   setns(target) → socket() / open() → setns(back)
//
// all synchronous on the main thread, with no await, spawn or Worker inside the window (a child
// started there would inherit the target namespace). setns affects only the calling thread, so the
// libuv threadpool keeps running in the original namespace meanwhile. If switching back fails the
// process would keep running in a workload's namespace, so we abort instead.
//
// This module and ./rtnetlink/index.ts are the public netlink API of the Linux backend; other
// backends import them by name.

import * as fs from 'node:fs';
import { WorkloadNetError, type ErrorCode } from '../../core/errors';
import {
  AF_NETLINK,
  CLONE_NEWNET,
  NETLINK_ROUTE,
  NS_GET_NSTYPE,
  SOCK_CLOEXEC,
  SOCK_RAW,
  ioctlNoArg,
  setns,
  socket,
} from './libc';
import { NetlinkSocket, type NetlinkSocketOptions } from './rtnetlink/socket';

/** Why a path could not be opened as a network namespace. */
export type NetnsOpenFailure = 'missing' | 'not-a-netns' | 'permission' | 'io';

const FAILURE_CODES: Record<NetnsOpenFailure, ErrorCode> = {
  missing: 'NOT_FOUND',
  'not-a-netns': 'INVALID_ARGUMENT',
  permission: 'FAILED_PRECONDITION',
  io: 'INTERNAL',
};

export class NetnsOpenError extends WorkloadNetError {
  constructor(
    readonly reason: NetnsOpenFailure,
    readonly path: string,
    message: string,
  ) {
    super(FAILURE_CODES[reason], message);
    this.name = 'NetnsOpenError';
  }
}

/** CLONE_NEW* values NS_GET_NSTYPE returns, for saying what a wrong path is instead. */
const NAMESPACE_KINDS: Record<number, string> = {
  0x00000080: 'time',
  0x00020000: 'mount',
  0x02000000: 'cgroup',
  0x04000000: 'UTS',
  0x08000000: 'IPC',
  0x10000000: 'user',
  0x20000000: 'PID',
  [CLONE_NEWNET]: 'network',
};

/** The namespace the main thread runs in, opened at load so that we can always switch back. */
const original: { fd: number; inode: number; dev: number } | Error = (() => {
  try {
    const fd = fs.openSync('/proc/thread-self/ns/net', 'r');
    const st = fs.fstatSync(fd);
    return { fd, inode: st.ino, dev: st.dev };
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
})();

function originalNamespace(): { fd: number; inode: number; dev: number } {
  if (original instanceof Error) {
    throw new WorkloadNetError(
      'FAILED_PRECONDITION',
      `cannot open this process's network namespace: ${original.message}`,
    );
  }
  return original;
}

/** An open network namespace. The fd pins the namespace: it exists as long as the handle is open. */
export class NetnsHandle {
  private closing: Promise<void> | undefined;

  private constructor(
    /** The path it was opened from. */
    readonly path: string,
    readonly fd: number,
    /** nsfs inode: the namespace's identity (what `ip netns identify` and `readlink` show). */
    readonly inode: number,
    private readonly owned: boolean,
  ) {}

  /**
   * Opens `path` (`/proc/<pid>/ns/net`, or a bind-mounted nsfs file such as `/var/run/netns/x` with
   * no process inside) and checks that it really is a network namespace. Regular files, directories
   * and other namespace types are rejected with INVALID_ARGUMENT.
   */
  static async open(path: string): Promise<NetnsHandle> {
    if (!path.startsWith('/')) {
      throw new NetnsOpenError('not-a-netns', path, `network namespace path "${path}" is not absolute`);
    }
    // O_NONBLOCK: a FIFO put where a namespace should be must fail the check, not hang the open.
    const fd = await new Promise<number>((resolve, reject) =>
      fs.open(path, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK, (err, fd) =>
        err ? reject(err) : resolve(fd),
      ),
    ).catch((err: NodeJS.ErrnoException) => {
      throw openFailure(path, err);
    });
    try {
      const inode = identify(path, fd);
      return new NetnsHandle(path, fd, inode, true);
    } catch (err) {
      fs.close(fd, () => undefined);
      throw err;
    }
  }

  /**
   * A namespace fd someone else opened, checked (as a network namespace of that inode) and will close;
   * closing this handle leaves it open.
   */
  static borrow(path: string, fd: number, inode: number): NetnsHandle {
    return new NetnsHandle(path, fd, inode, false);
  }

  /** The process's own namespace (the one the main thread was in at start-up). Closing it is a no-op. */
  static own(): NetnsHandle {
    const o = originalNamespace();
    return new NetnsHandle('/proc/thread-self/ns/net', o.fd, o.inode, false);
  }

  /** True when this is the namespace the process itself runs in. */
  get isOwn(): boolean {
    return this.inode === originalNamespace().inode;
  }

  get closed(): boolean {
    return this.closing !== undefined;
  }

  close(): Promise<void> {
    if (!this.closing) {
      // Closing an nsfs fd only drops a reference; it never waits, so it is done synchronously.
      if (this.owned) fs.closeSync(this.fd);
      this.closing = Promise.resolve();
    }
    return this.closing;
  }
}

/**
 * The inode of a network namespace fd, or a NetnsOpenError saying what the fd is instead.
 *
 * `readlink /proc/self/fd/N` shows `net:[inode]` only for the /proc/<pid>/ns/net form; a bind-mounted
 * nsfs file reads back as its mount path. So: the file must live on nsfs (the st_dev of our own
 * namespace file), and NS_GET_NSTYPE must say CLONE_NEWNET. Both are in-memory lookups on an open
 * fd, so they are done synchronously.
 */
function identify(path: string, fd: number): number {
  let st: fs.Stats;
  try {
    st = fs.fstatSync(fd);
  } catch (err) {
    throw openFailure(path, err as NodeJS.ErrnoException);
  }
  if (st.dev !== originalNamespace().dev) {
    throw new NetnsOpenError(
      'not-a-netns',
      path,
      `"${path}" is not a network namespace (it is ${describe(st)})`,
    );
  }
  let type: number;
  try {
    type = ioctlNoArg(fd, NS_GET_NSTYPE);
  } catch (err) {
    throw new NetnsOpenError('not-a-netns', path, `"${path}" is not a network namespace (${String(err)})`);
  }
  if (type !== CLONE_NEWNET) {
    const kind = NAMESPACE_KINDS[type] ?? `type 0x${type.toString(16)}`;
    throw new NetnsOpenError(
      'not-a-netns',
      path,
      `"${path}" is a ${kind} namespace, not a network namespace`,
    );
  }
  return st.ino;
}

function describe(st: fs.Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFile()) return 'a regular file';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not an nsfs file';
}

function openFailure(path: string, err: NodeJS.ErrnoException): NetnsOpenError {
  switch (err.code) {
    case 'ENOENT':
    case 'ESRCH':
      return new NetnsOpenError('missing', path, `network namespace "${path}" does not exist`);
    case 'EACCES':
    case 'EPERM':
      return new NetnsOpenError(
        'permission',
        path,
        `not allowed to open network namespace "${path}" (run as root or with CAP_SYS_ADMIN)`,
      );
    case 'ENOTDIR':
    case 'ELOOP':
    case 'ENXIO':
      return new NetnsOpenError('not-a-netns', path, `"${path}" is not a network namespace (${err.code})`);
    default:
      return new NetnsOpenError('io', path, `cannot open network namespace "${path}": ${err.message}`);
  }
}

/**
 * Runs `fn` with the main thread inside `ns`. `fn` must be synchronous and short: no await, no
 * child processes, no workers. Kept private so that only the two vetted operations below use it.
 */
function insideNetns<T>(ns: NetnsHandle, fn: () => T): T {
  if (ns.closed) throw new WorkloadNetError('INTERNAL', `network namespace handle for ${ns.path} is closed`);
  const back = originalNamespace();
  if (ns.inode === back.inode) return fn();
  // If this throws we never left, so there is nothing to undo.
  setns(ns.fd, CLONE_NEWNET);
  try {
    const result = fn();
    if (result instanceof Promise) throw new TypeError('insideNetns() needs a synchronous function');
    return result;
  } finally {
    try {
      setns(back.fd, CLONE_NEWNET);
    } catch (err) {
      // Carrying on would program the wrong namespace from now on; dying is the safe choice.
      process.stderr.write(`fatal: cannot return to the original network namespace: ${String(err)}\n`);
      process.abort();
    }
  }
}

/** A NETLINK_ROUTE socket that acts inside `ns` for its whole life (~12 µs of setns window). */
export function openNetlinkSocket(ns: NetnsHandle, opts: NetlinkSocketOptions = {}): NetlinkSocket {
  let fd: number;
  try {
    fd = insideNetns(ns, () => socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  } catch (err) {
    if (err instanceof WorkloadNetError) throw err;
    const code = (err as { code?: string }).code;
    if (code === 'EPERM') {
      throw new WorkloadNetError(
        'FAILED_PRECONDITION',
        `not allowed to enter network namespace ${ns.path} (needs root or CAP_SYS_ADMIN)`,
      );
    }
    throw new WorkloadNetError('INTERNAL', `cannot open a netlink socket in ${ns.path}: ${String(err)}`);
  }
  // Socket options do not depend on the namespace, so they are set after switching back.
  return NetlinkSocket.fromFd(fd, { label: ns.path, ...opts });
}

/**
 * Opens `/proc/sys/<relPath>` as seen from inside `ns` and returns the fd (caller closes it). The
 * net.* sysctls a file shows are decided when it is opened, so reading and writing the fd later, on
 * the threadpool and outside the window, still acts on `ns`.
 */
export function openProcSysFile(ns: NetnsHandle, relPath: string, flags: 'r' | 'r+'): number {
  if (
    relPath.startsWith('/') ||
    relPath.split('/').some((seg) => seg === '..' || seg === '') ||
    relPath.includes('\0')
  ) {
    throw new TypeError(`bad /proc/sys path "${relPath}"`);
  }
  return insideNetns(ns, () => fs.openSync(`/proc/sys/${relPath}`, flags));
}
