import { readdir, readFile, rmdir } from 'node:fs/promises';
import * as path from 'node:path';

// A test-owned cgroup for pod sandboxes, given to the runtime as a RELATIVE cgroup parent: runc (cgroupfs
// driver) then nests it under its own cgroup in every hierarchy, i.e. under the cgroup the test runs
// in, so pods stay inside whatever limits and accounting the test process has. An absolute parent would
// put them at the root of every hierarchy instead.

interface Hierarchy {
  /** Where the hierarchy is mounted, e.g. /sys/fs/cgroup/memory. */
  mountPoint: string;
  /** The cgroup, inside that hierarchy, of the process we resolved against. */
  cgroup: string;
}

/** Every cgroup directory of `relativePath` as runc resolves it for a process in the cgroups of `pid`. */
export async function cgroupDirsOf(relativePath: string, pid: number): Promise<string[]> {
  const hierarchies = await hierarchiesOf(pid);
  return hierarchies.map((h) => path.join(h.mountPoint, h.cgroup, relativePath));
}

async function hierarchiesOf(pid: number): Promise<Hierarchy[]> {
  const mounts = await cgroupMounts();
  const lines = (await readFile(`/proc/${pid}/cgroup`, 'utf8')).split('\n').filter(Boolean);
  const result: Hierarchy[] = [];
  for (const line of lines) {
    // "4:memory:/some/path", or "0::/path" for the unified (v2) hierarchy.
    const [id, controllers, ...rest] = line.split(':');
    const cgroup = rest.join(':');
    const key = id === '0' && controllers === '' ? 'cgroup2' : normaliseControllers(controllers ?? '');
    const mountPoint = mounts.get(key);
    if (mountPoint) result.push({ mountPoint, cgroup });
  }
  return result;
}

/** Map from a hierarchy's sorted controller list (or "cgroup2") to one of its mount points. */
async function cgroupMounts(): Promise<Map<string, string>> {
  const map = new Map<string, string>();
  for (const line of (await readFile('/proc/self/mountinfo', 'utf8')).split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const mountPoint = unescapeMountPath(line.slice(0, sep).split(' ')[4] ?? '');
    const [fstype, , superOptions = ''] = line.slice(sep + 3).split(' ');
    let key: string | undefined;
    if (fstype === 'cgroup2') key = 'cgroup2';
    else if (fstype === 'cgroup') key = normaliseControllers(superOptions);
    if (key !== undefined && !map.has(key)) map.set(key, mountPoint);
  }
  return map;
}

const NON_CONTROLLER_OPTIONS = new Set(['rw', 'ro', 'noprefix', 'clone_children', 'xattr', 'cpuset_v2_mode']);

function normaliseControllers(list: string): string {
  return list
    .split(',')
    .filter((o) => o !== '' && !NON_CONTROLLER_OPTIONS.has(o) && !o.startsWith('release_agent='))
    .sort()
    .join(',');
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
export function unescapeMountPath(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** Pids of every process in the cgroup trees rooted at `dirs` (missing trees contribute nothing). */
export async function pidsInCgroupTrees(dirs: readonly string[]): Promise<number[]> {
  const pids = new Set<number>();
  const walk = async (dir: string): Promise<void> => {
    let procs: string;
    try {
      procs = await readFile(path.join(dir, 'cgroup.procs'), 'utf8');
    } catch {
      return;
    }
    for (const p of procs.split('\n')) if (p) pids.add(Number(p));
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      if (entry.isDirectory()) await walk(path.join(dir, entry.name));
    }
  };
  for (const dir of dirs) await walk(dir);
  return [...pids];
}

/** Removes empty cgroup trees, children first. Returns the directories that could not be removed. */
export async function removeCgroupTrees(dirs: readonly string[]): Promise<string[]> {
  const failed: string[] = [];
  const remove = async (dir: string): Promise<void> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => undefined);
    if (!entries) return;
    for (const entry of entries) if (entry.isDirectory()) await remove(path.join(dir, entry.name));
    // A cgroup directory is removed with rmdir even though it lists control files.
    await rmdir(dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') failed.push(`${dir} (${err.code ?? err.message})`);
    });
  };
  for (const dir of dirs) await remove(dir);
  return failed;
}
