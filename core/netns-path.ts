import * as fs from 'node:fs';
import * as path from 'node:path';
import koffi from 'koffi';
import { WorkloadNetError } from './errors';

// Validates a workload's network namespace path before anything is changed. Both forms runtimes use
// are nsfs files: /proc/<pid>/ns/net and a bind mount such as /var/run/netns/cni-<uuid> (no process
// inside). An nsfs file lives on the nsfs device (the same st_dev as our own /proc/self/ns/net), and
// the NS_GET_NSTYPE ioctl tells a network namespace from a mount or PID namespace. Opening resolves
// symlinks, so a link to the host's namespace is caught by its inode too.

const MAX_PATH = 4096;
/** _IO(0xb7, 0x3) from linux/nsfs.h. */
const NS_GET_NSTYPE = 0xb703;
const CLONE_NEWNET = 0x40000000;
/** open(2) flag Node does not export: resolve the path without opening the file (same on every Linux arch). */
const O_PATH = 0o10000000;

let ioctl: ((fd: number, request: number) => number) | undefined;
function nsType(fd: number): number {
  // koffi: the prebuilt FFI binary ships inside the npm package; one ioctl is all we need here.
  ioctl ??= koffi.load('libc.so.6').func('int ioctl(int fd, unsigned long request)') as (
    fd: number,
    request: number,
  ) => number;
  return ioctl(fd, NS_GET_NSTYPE);
}

let nsfsDev: number | undefined;

/** A netns path that is not usable (INVALID_ARGUMENT); entry points may answer it in their own terms. */
export class NetnsPathError extends WorkloadNetError {
  constructor(message: string) {
    super('INVALID_ARGUMENT', message);
    this.name = 'NetnsPathError';
  }
}

export interface NetnsIdentity {
  /** Inode of the namespace (its identity for the kernel's lifetime). */
  inode: number;
}

/**
 * Inodes of namespaces that must never be handed to a workload: our own, PID 1's, and the initial
 * network namespace. Reading PID 1's link needs ptrace rights over it, which a daemon may lack; kernel
 * threads always live in the initial namespace and kthreadd (PID 2 in the host PID namespace) stays
 * readable, so it names the host's namespace when PID 1 does not.
 */
function protectedNamespaces(): Map<number, string> {
  const out = new Map<number, string>();
  const guard = (p: string, what: string): void => {
    try {
      const ino = fs.statSync(p).ino;
      if (!out.has(ino)) out.set(ino, what);
    } catch {
      // Unreadable here; the other entries still protect what they can.
    }
  };
  guard('/proc/self/ns/net', "the daemon's own network namespace");
  guard('/proc/1/ns/net', "the network namespace of PID 1 (the host's)");
  try {
    if (fs.readFileSync('/proc/2/comm', 'utf8').trim() === 'kthreadd') {
      guard('/proc/2/ns/net', "the host's initial network namespace");
    }
  } catch {
    // No kthreadd in this PID namespace (a container): PID 1's entry is all we have.
  }
  return out;
}

let protectedCache: Map<number, string> | undefined;

/**
 * A validated network namespace, still open: the fd pins the namespace and is handed to the backend
 * so that it need not open (and re-check) the path again. The caller closes it when the call is done.
 */
export interface OpenNetns extends NetnsIdentity {
  fd: number;
  /** Releases the fd; not awaited by anyone, nothing waits on it. */
  close(): void;
}

/** Validates `netnsPath` as a network namespace other than a protected one, and returns its identity. */
export async function inspectNetnsPath(netnsPath: string): Promise<NetnsIdentity> {
  const ns = await openNetnsPath(netnsPath);
  ns.close();
  return { inode: ns.inode };
}

/**
 * Validates `netnsPath` and returns it open. Refuses anything that is not an nsfs network namespace
 * (regular files, directories, FIFOs, devices, other namespace types) and the protected namespaces.
 */
export async function openNetnsPath(netnsPath: string): Promise<OpenNetns> {
  if (typeof netnsPath !== 'string' || netnsPath.length === 0) {
    throw new NetnsPathError('netns path is required (e.g. /proc/<pid>/ns/net or /var/run/netns/<name>)');
  }
  if (netnsPath.length > MAX_PATH || netnsPath.includes('\0')) {
    throw new NetnsPathError('netns path is too long or contains a NUL byte');
  }
  if (!path.isAbsolute(netnsPath) || path.normalize(netnsPath) !== netnsPath) {
    throw new NetnsPathError(
      `netns path ${JSON.stringify(netnsPath)} must be absolute and normalised (no "..", "." or "//")`,
    );
  }
  nsfsDev ??= fs.statSync('/proc/self/ns/net').dev;
  const notNsfs = (): Error =>
    new NetnsPathError(
      `netns path ${netnsPath} is not a namespace file (expected /proc/<pid>/ns/net or a bind-mounted nsfs file such as /var/run/netns/<name>)`,
    );
  const cannotOpen = (err: unknown): Error =>
    new NetnsPathError(
      `netns path ${netnsPath} cannot be opened (${(err as NodeJS.ErrnoException).code ?? 'error'}); is the workload still running?`,
    );
  // The path is opened with O_PATH first: that resolves it (on the threadpool, since a path walk may
  // wait on a slow filesystem) without opening the file itself, so a FIFO cannot block and a device
  // cannot act. Only once fstat shows an nsfs file is it opened for real, through /proc/self/fd/N:
  // that names the very inode already checked (no race with a re-pointed path) and involves no
  // filesystem but /proc and nsfs, so it is done synchronously, as are the checks on the open fd.
  // One threadpool round trip in all: each costs ~0.1 ms of the event loop's time on these machines.
  const pathFd = await new Promise<number>((resolve, reject) =>
    fs.open(netnsPath, O_PATH, (err, n) => (err ? reject(cannotOpen(err)) : resolve(n))),
  );
  let fd: number;
  let st: fs.Stats;
  try {
    st = fs.fstatSync(pathFd);
    if (st.dev !== nsfsDev) throw notNsfs();
    fd = fs.openSync(`/proc/self/fd/${pathFd}`, fs.constants.O_RDONLY);
  } catch (err) {
    throw err instanceof WorkloadNetError ? err : cannotOpen(err);
  } finally {
    fs.closeSync(pathFd);
  }
  // Closing an nsfs fd only drops a reference; it never waits.
  const close = (): void => fs.closeSync(fd);
  try {
    if (nsType(fd) !== CLONE_NEWNET) {
      throw new NetnsPathError(
        `netns path ${netnsPath} is a namespace of another type, not a network namespace`,
      );
    }
    protectedCache ??= protectedNamespaces();
    const what = protectedCache.get(st.ino);
    if (what)
      throw new NetnsPathError(`netns path ${netnsPath} is ${what}; refusing to attach a workload to it`);
    return { inode: st.ino, fd, close };
  } catch (err) {
    close();
    throw err;
  }
}

/** Whether the namespace at `netnsPath` still exists and is the one recorded (same inode). */
export async function netnsStillPresent(netnsPath: string, inode: number): Promise<boolean> {
  try {
    return (await inspectNetnsPath(netnsPath)).inode === inode;
  } catch {
    return false;
  }
}
