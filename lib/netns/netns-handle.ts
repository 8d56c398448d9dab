// Network namespace handles: the one place that opens, identifies and validates a network namespace,
// and the one way to act inside one. The core opens a workload's namespace once per Attach (through
// core/netns-opener.ts) and hands the handle to the backend; backends and the simulator open their
// own (the node's, the DPU's) here too.
//
// Both forms runtimes use are nsfs files: /proc/<pid>/ns/net and a bind mount such as
// /var/run/netns/cni-<uuid> (no process inside). An nsfs file lives on the nsfs device (the same
// st_dev as our own namespace file), and the NS_GET_NSTYPE ioctl tells a network namespace from a
// mount or PID namespace. Opening resolves symlinks, so a link to the host's namespace is caught by
// its inode too. What the path's text must look like is checked first (netns-path-form.ts); the
// namespaces a workload may not have are in protected-namespaces.ts.
//
// Acting inside a namespace means, for the one system call that creates a namespace-bound object
// (a netlink socket, a /proc/sys file):
//
//   setns(target) → socket() / open() → setns(back)
//
// all synchronous on the main thread, with no await, spawn or Worker inside the window (a child
// started there would inherit the target namespace). setns affects only the calling thread, so the
// libuv threadpool keeps running in the original namespace meanwhile. If switching back fails the
// process would keep running in a workload's namespace, so we abort instead.

import * as fs from 'node:fs';
import { CLONE_NEWNET, NS_GET_NSTYPE, ioctlNoArg, setns } from '../libc';
import { NetnsError, NetnsStateError } from './netns-error';
import { checkPathForm, checkProcLinkType } from './netns-path-form';
import { originalNamespace } from './own-netns';
import { PathWalkPolicy, isProcNamespaceLink, namespaceDirectoryOf } from './path-walk-policy';
import { protectedNamespace } from './protected-namespaces';

const walkPolicy = new PathWalkPolicy();
/** open(2) flag Node does not export: resolve the path without opening the file (same on every Linux arch). */
const O_PATH = 0o10000000;

/** CLONE_NEW* values NS_GET_NSTYPE returns, for saying what a wrong path is instead. */
const NAMESPACE_KINDS: Record<number, string> = {
  0x00000080: 'time',
  0x00020000: 'mount',
  0x02000000: 'cgroup',
  0x04000000: 'UTS',
  0x08000000: 'IPC',
  0x10000000: 'user',
  0x20000000: 'PID',
};

export interface OpenOptions {
  /**
   * The namespace is a workload's: the path must be absolute and normalised, and the daemon's own and
   * the host's namespaces are refused.
   */
  workload?: boolean;
}

/** An open network namespace, as the core hands it to a backend. */
export interface Netns {
  /** The path it was opened from. */
  readonly path: string;
  readonly fd: number;
  /** nsfs inode: the namespace's identity. */
  readonly inode: number;
  /**
   * Device of the directory the path was found in (see path-walk-policy's namespaceDirectoryOf), when
   * known: recorded with the attachment, so that the leak sweep can tell the mount it was made through
   * from another one mounted over it later (sweep-guard.ts).
   */
  readonly dirDev?: number;
  readonly closed: boolean;
  close(): void;
  /** See NetnsHandle.enter. */
  enter<T>(create: () => T): T;
}

/**
 * What a path shows of a recorded namespace. `gone` is evidence: the path names nothing (unlinked, or
 * its process exited) or another namespace. `unseen` is not: something is there but not a namespace
 * (the file a bind mount covers, seen from a mount namespace the mount did not propagate to), or it
 * cannot be looked at (no ptrace rights over the process).
 */
export type NetnsPresence = 'present' | 'gone' | 'unseen';

/** An open network namespace. The fd pins the namespace: it exists as long as the handle is open. */
export class NetnsHandle implements Netns {
  private isClosed = false;
  private directoryDevice?: number;

  private constructor(
    /** The path it was opened from. */
    readonly path: string,
    readonly fd: number,
    /** nsfs inode: the namespace's identity (what `ip netns identify` and `readlink` show). */
    readonly inode: number,
    private readonly owned: boolean,
  ) {}

  /**
   * Opens `netnsPath` (`/proc/<pid>/ns/net`, or a bind-mounted nsfs file such as `/var/run/netns/x`)
   * and checks that it is a network namespace. Refuses regular files, directories, FIFOs, devices and
   * other namespace types; with `workload`, also the daemon's own and the host's namespace.
   */
  static async open(netnsPath: string, opts: OpenOptions = {}): Promise<NetnsHandle> {
    checkPathForm(netnsPath, opts.workload === true);
    checkProcLinkType(netnsPath);
    // The path is opened with O_PATH first: that resolves it without opening the file itself, so a
    // FIFO cannot block and a device cannot act. Only once fstat shows an nsfs file is it opened for
    // real, through /proc/self/fd/N: that names the very inode already checked (no race with a
    // re-pointed path) and involves no filesystem but /proc and nsfs, so it is done synchronously, as
    // are the checks on the open fd. The resolving itself is synchronous only where the path's
    // directory is on a local filesystem (path-walk-policy.ts) and the file is no symlink (which
    // could lead anywhere) other than procfs's own /proc/<pid>/ns/<type> links; otherwise it runs on
    // the threadpool, since a walk may wait on a slow filesystem.
    const allowed = walkPolicy.syncWalkAllowed(netnsPath);
    if (allowed === true || (allowed !== false && (await allowed))) {
      const pathFd = openPathInline(netnsPath, isProcNamespaceLink(netnsPath));
      if (pathFd !== undefined) {
        const handle = NetnsHandle.fromPathFd(netnsPath, pathFd, opts);
        // The directory was just walked on a local filesystem: its inode is cached, the stat is cheap.
        handle.directoryDevice = directoryDeviceSync(netnsPath);
        return handle;
      }
    }
    const pathFd = await new Promise<number>((resolve, reject) =>
      fs.open(netnsPath, O_PATH, (err, n) => (err ? reject(openFailure(netnsPath, err)) : resolve(n))),
    );
    const handle = NetnsHandle.fromPathFd(netnsPath, pathFd, opts);
    handle.directoryDevice = await fs.promises.stat(namespaceDirectoryOf(netnsPath)).then(
      (st) => st.dev,
      () => undefined,
    );
    return handle;
  }

  /**
   * open(), synchronously: for a thread that does nothing else (a worker), never the event loop, where a
   * path walk on a slow filesystem would stall everything.
   */
  static openSync(netnsPath: string, opts: OpenOptions = {}): NetnsHandle {
    checkPathForm(netnsPath, opts.workload === true);
    checkProcLinkType(netnsPath);
    let pathFd: number;
    try {
      pathFd = fs.openSync(netnsPath, O_PATH);
    } catch (err) {
      throw openFailure(netnsPath, err as NodeJS.ErrnoException);
    }
    return NetnsHandle.fromPathFd(netnsPath, pathFd, opts);
  }

  /** The checks on a path resolved with O_PATH (closed here), then the real open. */
  private static fromPathFd(netnsPath: string, pathFd: number, opts: OpenOptions): NetnsHandle {
    let fd: number;
    let st: fs.Stats;
    try {
      st = fs.fstatSync(pathFd);
      if (st.dev !== originalNamespace().dev) {
        throw new NetnsError(
          'not-a-netns',
          netnsPath,
          `netns path ${netnsPath} is not a namespace file (it is ${describe(st)}; expected /proc/<pid>/ns/net or a bind-mounted nsfs file such as /var/run/netns/<name>)`,
        );
      }
      fd = fs.openSync(`/proc/self/fd/${pathFd}`, fs.constants.O_RDONLY);
    } catch (err) {
      throw err instanceof NetnsError || err instanceof NetnsStateError
        ? err
        : openFailure(netnsPath, err as NodeJS.ErrnoException);
    } finally {
      fs.closeSync(pathFd);
    }
    const handle = new NetnsHandle(netnsPath, fd, st.ino, true);
    try {
      handle.checkType();
      if (opts.workload) handle.refuseProtected();
      return handle;
    } catch (err) {
      handle.close();
      throw err;
    }
  }

  /**
   * A handle on a namespace fd that its owner keeps open and already checked (the core's handle, lent
   * to a backend's worker thread for one call; fds are shared by all threads). Closing it is a no-op.
   */
  static borrow(netnsPath: string, fd: number, inode: number): NetnsHandle {
    return new NetnsHandle(netnsPath, fd, inode, false);
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
    return this.isClosed;
  }

  get dirDev(): number | undefined {
    return this.directoryDevice;
  }

  /** Releases the fd. Closing an nsfs fd only drops a reference and never waits, so it is synchronous. */
  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    if (this.owned) fs.closeSync(this.fd);
  }

  /**
   * Runs `create` with the main thread inside this namespace and returns what it made. `create` must
   * be synchronous and short: one system call that makes a namespace-bound object (a socket, a
   * /proc/sys file). No await, no child processes, no workers.
   */
  enter<T>(create: () => T): T {
    if (this.isClosed)
      throw new NetnsStateError('closed', `network namespace handle for ${this.path} is closed`);
    const back = originalNamespace();
    if (this.inode === back.inode) return create();
    // If this throws we never left, so there is nothing to undo.
    setns(this.fd, CLONE_NEWNET);
    try {
      const result = create();
      if (result instanceof Promise) throw new TypeError('NetnsHandle.enter() needs a synchronous function');
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

  private checkType(): void {
    let type: number;
    try {
      type = ioctlNoArg(this.fd, NS_GET_NSTYPE);
    } catch (err) {
      throw new NetnsError(
        'not-a-netns',
        this.path,
        `netns path ${this.path} is not a namespace (${String(err)})`,
      );
    }
    if (type !== CLONE_NEWNET) {
      const kind = NAMESPACE_KINDS[type] ?? `type 0x${type.toString(16)}`;
      throw new NetnsError(
        'not-a-netns',
        this.path,
        `netns path ${this.path} is a ${kind} namespace, not a network namespace`,
      );
    }
  }

  private refuseProtected(): void {
    const what = protectedNamespace(this.inode);
    if (what) {
      throw new NetnsError(
        'protected',
        this.path,
        `netns path ${this.path} is ${what}; refusing to attach a workload to it`,
      );
    }
  }
}

/**
 * Whether the namespace at `netnsPath` still exists and is the one recorded (same nsfs inode). A stat
 * is enough: the namespace was checked as a network namespace when it was recorded, and nsfs gives a
 * live namespace an inode no other holds. Asked for every attachment on every leak sweep, so it opens
 * nothing.
 */
export async function netnsStillPresent(netnsPath: string, inode: number): Promise<boolean> {
  return (await netnsPresence(netnsPath, inode)) === 'present';
}

/**
 * What `netnsPath` shows of the namespace recorded as `inode` (see NetnsPresence). Only a path that
 * names nothing, or another namespace, counts as gone: whether the directory it is in is the one the
 * attachment was made through is the sweep guard's question (sweep-guard.ts).
 */
export async function netnsPresence(netnsPath: string, inode: number): Promise<NetnsPresence> {
  if (!netnsPath) return 'gone';
  let st: fs.Stats;
  try {
    st = await fs.promises.stat(netnsPath);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ESRCH' || code === 'ENOTDIR' ? 'gone' : 'unseen';
  }
  if (st.dev !== originalNamespace().dev) return 'unseen';
  return st.ino === inode ? 'present' : 'gone';
}

/**
 * The path resolved with O_PATH, synchronously. A final symlink is followed only when `followLink`;
 * otherwise the result is undefined when the last component is one (the caller resolves it on the
 * threadpool instead).
 */
function openPathInline(netnsPath: string, followLink: boolean): number | undefined {
  let fd: number;
  try {
    fd = fs.openSync(netnsPath, followLink ? O_PATH : O_PATH | fs.constants.O_NOFOLLOW);
  } catch (err) {
    throw openFailure(netnsPath, err as NodeJS.ErrnoException);
  }
  let link: boolean;
  try {
    link = fs.fstatSync(fd).isSymbolicLink();
  } catch (err) {
    fs.closeSync(fd);
    throw openFailure(netnsPath, err as NodeJS.ErrnoException);
  }
  if (!link) return fd;
  fs.closeSync(fd);
  return undefined;
}

/** The device of the directory `netnsPath` was found in, or undefined when it cannot be read. */
function directoryDeviceSync(netnsPath: string): number | undefined {
  try {
    return fs.statSync(namespaceDirectoryOf(netnsPath)).dev;
  } catch {
    return undefined;
  }
}

function describe(st: fs.Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFile()) return 'a regular file';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not an nsfs file';
}

function openFailure(netnsPath: string, err: NodeJS.ErrnoException): NetnsError {
  const code = err.code ?? 'error';
  switch (code) {
    case 'ENOENT':
    case 'ESRCH':
      return new NetnsError(
        'missing',
        netnsPath,
        `netns path ${netnsPath} cannot be opened (${code}); is the workload still running?`,
      );
    case 'EACCES':
    case 'EPERM':
      return new NetnsError(
        'permission',
        netnsPath,
        `netns path ${netnsPath} cannot be opened (${code}); run as root or with CAP_SYS_ADMIN`,
      );
    case 'ENOTDIR':
    case 'ELOOP':
    case 'ENXIO':
      return new NetnsError('not-a-netns', netnsPath, `netns path ${netnsPath} cannot be opened (${code})`);
    default:
      return new NetnsError('io', netnsPath, `netns path ${netnsPath} cannot be opened (${code})`);
  }
}
