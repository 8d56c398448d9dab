import * as fs from 'node:fs';
import { exhausted, failedPrecondition, type WorkloadNetError } from '../errors';

// Whether the state directory can hold a store that LMDB is about to create. LMDB sizes a new lock
// file (and the map of the data file) with ftruncate and then writes through the memory map: on a
// full filesystem the first touch of such a page cannot be backed and the kernel ends the process with
// SIGBUS (exit 135, nothing logged), which a service manager turns into a crash loop. Writes through
// write(2) fail with ENOSPC instead, which is why an existing store on a full disk only fails its
// writes (store-write-health.ts). So before LMDB creates either file, the daemon checks that there is
// room for them, and refuses in words when there is not.

/**
 * Free space a store being created needs: a new store takes ~52 KiB (lock file and data file with
 * its first rows), and the daemon's first attaches need room to grow it; more than that, so that a
 * disk with a few KiB left is not taken for one with room.
 */
export const NEW_STORE_MIN_FREE_BYTES = 256 * 1024;

/**
 * Makes the state directory (if needed) and, when LMDB would create `file` or its lock file, checks
 * that the filesystem has room for them. Throws a WorkloadNetError naming the directory, the errno
 * and what to do.
 */
export function prepareStateDir(dir: string, file: string): void {
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o750 });
  } catch (err) {
    throw cannotUse(dir, err);
  }
  if (!creates(file) && !creates(`${file}-lock`)) return;
  let free: number;
  try {
    const st = fs.statfsSync(dir);
    free = st.bavail * st.bsize;
  } catch (err) {
    throw cannotUse(dir, err);
  }
  if (free < NEW_STORE_MIN_FREE_BYTES) {
    throw exhausted(
      `cannot create the state store in ${dir}: its filesystem is full (ENOSPC: ${kib(free)} free, a new ` +
        `store needs ${kib(NEW_STORE_MIN_FREE_BYTES)}); free space there (or point stateDir at a ` +
        `filesystem with room) and start the daemon again; see "A full or read-only state disk" in ` +
        `docs/troubleshooting.md`,
    );
  }
}

/** Whether LMDB would create (or size from nothing) this file. */
function creates(file: string): boolean {
  try {
    return fs.statSync(file).size === 0;
  } catch {
    return true;
  }
}

function cannotUse(dir: string, err: unknown): WorkloadNetError {
  const e = err as NodeJS.ErrnoException;
  return failedPrecondition(
    `cannot use the state directory ${dir}: ${e.code ?? 'error'} (${e.message}); make sure its ` +
      `filesystem is mounted, writable and has room, or point stateDir elsewhere, and start the daemon again`,
  );
}

function kib(bytes: number): string {
  return `${Math.floor(bytes / 1024)} KiB`;
}
