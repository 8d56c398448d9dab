import * as path from 'node:path';
import { open, type RootDatabase } from 'lmdb';
import { failedPrecondition } from '../errors';
import { checkStoreFile } from './store-file-check';
import { prepareStateDir } from './store-room';

// Opening the LMDB environment that holds the store: the state directory made ready, the data file
// checked before it is mapped, and the options the store's durability and memory depend on. Its own
// file because these are settings of lmdb and of the disk, apart from the records the store keeps.

/** The data file inside the state directory. */
export const STORE_FILE = 'workloadnet.mdb';

/**
 * Address space reserved for the memory map up front (virtual only: the file grows with the data, and
 * only pages that are read count as resident).
 */
const MAP_SIZE_BYTES = 1024 * 1024 * 1024;

/**
 * lmdb starts with a 128 KiB map and doubles it as the file grows, keeping every earlier map alive (a
 * value read earlier may still point into it). Pages read through an old map stay resident next to
 * their copies in the new one, so the resident map grows to a multiple of the file (docs/benchmarks.md).
 * Reserving the map once keeps a single one. 32-bit builds keep lmdb's default, which grows in chunks
 * because their address space is too small to reserve.
 */
function mapSizeOption(): { mapSize?: number } {
  return ARCHES_64.has(process.arch) ? { mapSize: MAP_SIZE_BYTES } : {};
}

/** Values of process.arch with a 64-bit address space. */
const ARCHES_64 = new Set<string>(['x64', 'arm64', 'ppc64', 's390x', 'riscv64', 'loong64']);

/**
 * Opens (creating if needed) the environment of the store under `stateDir`, refusing a data file that
 * is damaged (checked before it is mapped, since lmdb would crash on it).
 */
export function openEnvironment(stateDir: string): RootDatabase {
  const file = path.join(stateDir, STORE_FILE);
  prepareStateDir(stateDir, file);
  const report = checkStoreFile(file);
  if (report.problems.length > 0) {
    throw failedPrecondition(
      `the state store ${file} is damaged and will not be opened: ${report.problems.join('; ')}. ` +
        `Move the state directory aside (keep it for analysis) and restart; see "A damaged state store" ` +
        `in docs/troubleshooting.md`,
    );
  }
  return open({
    path: file,
    // Resolve a write only once it is on disk, so "committed before the call returns" holds across a
    // power loss and not just a process crash.
    overlappingSync: false,
    compression: false,
    // With event-turn batching lmdb starts each batch with a write whose promise nobody holds; when
    // the commit fails (full disk) that promise rejects unhandled and Node ends the process. Our
    // writes are all transactions, which lmdb batches anyway.
    eventTurnBatching: false,
    ...mapSizeOption(),
  });
}
