import * as fs from 'node:fs';
import * as path from 'node:path';

// Whether a namespace path may be resolved synchronously, on the event loop. Resolving a path can
// wait as long as its filesystem makes it: on NFS, CIFS or FUSE that is unbounded, so such paths are
// walked on the threadpool. On a local filesystem (procfs, tmpfs, a local disk) the directories that
// runtimes use (/proc/<pid>/ns, /var/run/netns) are in the dentry cache and the walk takes a few
// microseconds, while the threadpool hop costs tens to hundreds (the hop wakes a pool thread that takes
// a CPU from the event loop on a small machine; measured in docs/benchmarks.md). The verdict is per
// directory, symlinks resolved, and is asked again after a while, so a filesystem mounted over a
// directory later is noticed.

/** statfs(2) f_type of filesystems whose lookups never wait on a network or a user-space server. */
const LOCAL_FILESYSTEMS = new Map<number, string>([
  [0x9fa0, 'proc'],
  [0x01021994, 'tmpfs'],
  [0x858458f6, 'ramfs'],
  [0x6e736673, 'nsfs'],
  [0xef53, 'ext2/3/4'],
  [0x58465342, 'xfs'],
  [0x9123683e, 'btrfs'],
  [0xf2f52010, 'f2fs'],
  [0x794c7630, 'overlayfs'],
]);

/** How long a directory's verdict is trusted. */
const VERDICT_TTL_MS = 60_000;
/** Directories remembered at most (a runtime uses a handful; a hostile caller could name many). */
const MAX_DIRS = 256;

interface Verdict {
  local: boolean;
  at: number;
}

export class PathWalkPolicy {
  private readonly verdicts = new Map<string, Verdict>();

  /** `now` is a monotonic clock in ms: a wall-clock step must not expire or freeze every verdict. */
  constructor(private readonly now: () => number = () => performance.now()) {}

  /**
   * Whether `file` may be resolved synchronously: a boolean at once when its directory's verdict is
   * known, else a promise that finds out (on the threadpool) and remembers.
   */
  syncWalkAllowed(file: string): boolean | Promise<boolean> {
    const dir = namespaceDirectoryOf(file);
    const v = this.verdicts.get(dir);
    if (v && this.now() - v.at < VERDICT_TTL_MS) return v.local;
    return this.judge(dir);
  }

  private async judge(dir: string): Promise<boolean> {
    let local = false;
    try {
      const real = await fs.promises.realpath(dir);
      const st = await fs.promises.statfs(real);
      local = LOCAL_FILESYSTEMS.has(Number(st.type));
    } catch {
      // Missing or unreadable: the open that follows reports it, from the threadpool.
      local = false;
    }
    if (this.verdicts.size >= MAX_DIRS) this.verdicts.clear();
    this.verdicts.set(dir, { local, at: this.now() });
    return local;
  }
}

/** A process's namespace file: the walk stays inside procfs. */
const PROC_NS_FILE = /^\/proc\/(?:[0-9]+|self|thread-self)\/(?:task\/[0-9]+\/)?ns\/[a-z_]+$/;

/**
 * Whether `file` is a process's namespace link (/proc/<pid>/ns/<type>): a link procfs resolves into
 * nsfs itself, so following it walks no other filesystem.
 */
export function isProcNamespaceLink(file: string): boolean {
  return PROC_NS_FILE.test(file);
}

/**
 * The directory a namespace path is found through: /proc for every /proc/<pid>/ns/<type> (they share
 * procfs's walk verdict, and the procfs mount tells which PID namespace's processes the path names);
 * for any other path (/proc/<pid>/root/… included, which leads into another filesystem) its
 * directory.
 */
export function namespaceDirectoryOf(file: string): string {
  return isProcNamespaceLink(file) ? '/proc' : path.dirname(file);
}
