import * as fs from 'node:fs';
import { namespaceDirectoryOf } from '../../lib/netns/path-walk-policy';
import type { HoldKind } from '../metrics';

// Whether namespaces that look gone are evidence that their workloads are gone, or only that the
// daemon cannot see them. A daemon started in a mount namespace where /var/run/netns is another (empty)
// mount — a container without the hostPath mount, a service unit with private mounts — finds every
// bind-mounted namespace missing; releasing on that would take every workload on the node down. So
// the leak sweep and the start-up reconcile release nothing while:
//
//   - a directory that namespaces looked gone in cannot be read, or is not a directory;
//   - it is another mount (another st_dev) than the one the attachments were made through (recorded
//     at attach; /proc/<pid>/ns/* paths are judged by the procfs mount, which also tells one PID
//     namespace's processes from another's);
//   - it is empty while namespaces of several workloads were made there (one deletion empties a
//     directory that held one; several at once look like a view that lost them);
//   - more than a small share of all workloads' namespaces look gone in one pass.
//
// A namespace path that is gone in a directory that passes these is evidence: `ip netns del` and the
// runtimes unmount and unlink it, and a /proc/<pid>/ns/net path goes when its process exits.
// `workloadnet gc --namespaces-gone` releases anyway: the operator has looked.

export interface Hold {
  kind: HoldKind;
  /** For Status and the log: what is wrong, and what releases anyway. */
  reason: string;
}

/** A namespace found gone: its path, and the directory device recorded when it was attached. */
export interface GoneNamespace {
  netnsPath: string;
  netnsDirDev?: number;
}

/**
 * Workloads' namespaces that may be found gone in one pass: one always (a single pod deleted on a
 * small node), else a fifth of them. A runtime that loses a fifth of its pods at once between two
 * sweeps is rare enough that asking the operator costs less than being wrong.
 */
export const MAX_GONE_SHARE = 0.2;
export const MAX_GONE_ALWAYS = 1;

export function goneLimit(namespaces: number): number {
  return Math.max(MAX_GONE_ALWAYS, Math.floor(namespaces * MAX_GONE_SHARE));
}

const FORCE_HINT =
  'nothing is released until it is (`workloadnet gc --namespaces-gone` releases them anyway)';

/**
 * The first reason why `gone` (distinct namespaces, of `namespaces` recorded in all) is no evidence,
 * or undefined when it is.
 */
export async function judgeGone(
  gone: readonly GoneNamespace[],
  namespaces: number,
): Promise<Hold | undefined> {
  const byDir = new Map<string, GoneNamespace[]>();
  for (const g of gone) {
    const dir = namespaceDirectoryOf(g.netnsPath);
    byDir.set(dir, [...(byDir.get(dir) ?? []), g]);
  }
  for (const [dir, inDir] of byDir) {
    const hold = await judgeDirectory(dir, inDir);
    if (hold) return hold;
  }
  const limit = goneLimit(namespaces);
  if (gone.length > limit) {
    return {
      kind: 'too_many_gone',
      reason:
        `leak sweep held: ${gone.length} of ${namespaces} workload namespaces look gone at once ` +
        `(at most ${limit} are released in one sweep); check that the daemon sees the runtime's ` +
        `namespace directories; ${FORCE_HINT}`,
    };
  }
  return undefined;
}

async function judgeDirectory(dir: string, gone: GoneNamespace[]): Promise<Hold | undefined> {
  const n = gone.length;
  let st: fs.Stats;
  try {
    st = await fs.promises.stat(dir);
    if (!st.isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
  } catch (err) {
    return {
      kind: 'directory_unreadable',
      reason:
        `leak sweep held: the namespace directory ${dir} cannot be read ` +
        `(${(err as NodeJS.ErrnoException).code ?? 'error'}), so ${n} namespace(s) missing there are ` +
        `no evidence; ${FORCE_HINT}`,
    };
  }
  const recorded = gone.map((g) => g.netnsDirDev).find((d) => d !== undefined && d !== st.dev);
  if (recorded !== undefined) {
    return {
      kind: 'directory_other_mount',
      reason:
        `leak sweep held: ${dir} is another mount (device ${devName(st.dev)}) than the one ` +
        `${n} attachment(s) were made through (${devName(recorded)}); does the daemon lack the host's ` +
        `${dir} mount or its propagation?; ${FORCE_HINT}`,
    };
  }
  if (n > 1 && dir !== '/proc') {
    const entries = await fs.promises.readdir(dir).catch(() => undefined);
    if (entries?.length === 0) {
      return {
        kind: 'directory_empty',
        reason:
          `leak sweep held: ${dir} is empty, yet ${n} workload namespaces were made there; ` +
          `does the daemon see the host's ${dir}?; ${FORCE_HINT}`,
      };
    }
  }
  return undefined;
}

/** major:minor of a Linux dev_t, as /proc/self/mountinfo and `stat -c %Hd:%Ld` show it. */
function devName(dev: number): string {
  const major = Math.floor(dev / 0x100) & 0xfff;
  const minor = (dev & 0xff) | (Math.floor(dev / 0x1000) & ~0xff);
  return `${major}:${minor}`;
}

/** A namespace's identity as the sweep and the reconcile compare it: the inode recorded, at the path recorded. */
export function namespaceOf(rec: { netnsInode: number; netnsPath: string }): string {
  return `${rec.netnsInode} ${rec.netnsPath}`;
}

/** One row per distinct namespace among `rows` (a workload's interfaces share one). */
export function uniqueNamespaces<T extends { netnsInode: number; netnsPath: string }>(
  rows: readonly T[],
): T[] {
  return [...new Map(rows.map((r) => [namespaceOf(r), r])).values()];
}
