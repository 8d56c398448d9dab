import * as fs from 'node:fs';

// The kernel's boot id: a random UUID the kernel makes at each boot. Nothing of one boot's network
// namespaces, processes or links survives into the next, so state recorded under another boot id
// describes workloads that are certainly gone, whatever a file system view says.

const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

/** This boot's id, or '' where the kernel does not say (then no state counts as from another boot). */
export function currentBootId(): string {
  try {
    return fs.readFileSync(BOOT_ID_FILE, 'utf8').trim();
  } catch {
    return '';
  }
}
