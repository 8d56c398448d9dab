import * as fs from 'node:fs';
import * as path from 'node:path';
import koffi from 'koffi';
import { invalidArgument } from './errors';

// Validates a workload's network namespace path before anything is changed. Both forms runtimes use
// are nsfs files: /proc/<pid>/ns/net and a bind mount such as /var/run/netns/cni-<uuid> (no process
// inside). An nsfs file lives on the nsfs device (the same st_dev as our own /proc/self/ns/net), and
// the NS_GET_NSTYPE ioctl tells a network namespace from a mount or PID namespace. Opening resolves
// symlinks, so a link to the host's namespace is caught by its inode too.

const MAX_PATH = 4096;
/** _IO(0xb7, 0x3) from linux/nsfs.h. */
const NS_GET_NSTYPE = 0xb703;
const CLONE_NEWNET = 0x40000000;

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

export async function inspectNetnsPath(netnsPath: string): Promise<NetnsIdentity> {
  if (typeof netnsPath !== 'string' || netnsPath.length === 0) {
    throw invalidArgument('netns path is required (e.g. /proc/<pid>/ns/net or /var/run/netns/<name>)');
  }
  if (netnsPath.length > MAX_PATH || netnsPath.includes('\0')) {
    throw invalidArgument('netns path is too long or contains a NUL byte');
  }
  if (!path.isAbsolute(netnsPath) || path.normalize(netnsPath) !== netnsPath) {
    throw invalidArgument(
      `netns path ${JSON.stringify(netnsPath)} must be absolute and normalised (no "..", "." or "//")`,
    );
  }
  nsfsDev ??= fs.statSync('/proc/self/ns/net').dev;
  const notNsfs = (): Error =>
    invalidArgument(
      `netns path ${netnsPath} is not a namespace file (expected /proc/<pid>/ns/net or a bind-mounted nsfs file such as /var/run/netns/<name>)`,
    );
  // stat before open: opening a FIFO or a device could block a threadpool thread forever.
  let before: fs.Stats;
  try {
    before = await fs.promises.stat(netnsPath);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw invalidArgument(
      `netns path ${netnsPath} cannot be opened (${code}); is the workload still running?`,
    );
  }
  if (before.dev !== nsfsDev) throw notNsfs();
  let handle: fs.promises.FileHandle;
  try {
    // O_NONBLOCK in case the path was swapped for something else since the stat.
    handle = await fs.promises.open(netnsPath, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw invalidArgument(
      `netns path ${netnsPath} cannot be opened (${code}); is the workload still running?`,
    );
  }
  let inode: number;
  try {
    const st = await handle.stat();
    if (st.dev !== nsfsDev) throw notNsfs();
    if (nsType(handle.fd) !== CLONE_NEWNET) {
      throw invalidArgument(
        `netns path ${netnsPath} is a namespace of another type, not a network namespace`,
      );
    }
    inode = st.ino;
  } finally {
    await handle.close();
  }
  protectedCache ??= protectedNamespaces();
  const what = protectedCache.get(inode);
  if (what) throw invalidArgument(`netns path ${netnsPath} is ${what}; refusing to attach a workload to it`);
  return { inode };
}

/** Whether the namespace at `netnsPath` still exists and is the one recorded (same inode). */
export async function netnsStillPresent(netnsPath: string, inode: number): Promise<boolean> {
  try {
    return (await inspectNetnsPath(netnsPath)).inode === inode;
  } catch {
    return false;
  }
}
