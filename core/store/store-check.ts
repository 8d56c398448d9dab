import * as path from 'node:path';
import { open } from 'lmdb';
import { checkStoreFile, type StoreFileReport } from './store-file-check';
import { SHARED_STRUCTURES_KEY, type AttachmentRecord } from './attachment-record';
import { STORE_FILE } from './store-environment';
import type { StoreIdentity } from './store-identity';

// The offline check behind `workloadnet store check`: the same file check the daemon runs before it
// maps the store, then (when that passes) every row read through lmdb without writing anything, and
// no address held by two rows.

export interface StoreCheckResult {
  file: string;
  exists: boolean;
  ok: boolean;
  problems: string[];
  sizeBytes: number;
  schemaVersion?: number;
  identity?: StoreIdentity;
  attachments?: number;
  addresses?: number;
}

export async function checkStore(stateDir: string): Promise<StoreCheckResult> {
  const file = path.join(stateDir, STORE_FILE);
  const report: StoreFileReport = checkStoreFile(file);
  const result: StoreCheckResult = {
    file,
    exists: report.exists,
    ok: report.problems.length === 0,
    problems: [...report.problems],
    sizeBytes: report.sizeBytes,
  };
  if (!report.exists || !result.ok) return result;
  let root: ReturnType<typeof open> | undefined;
  try {
    root = open({ path: file, readOnly: true, compression: false });
    const meta = root.openDB<unknown, string>({ name: 'meta' });
    const attachments = root.openDB<AttachmentRecord, string>({
      name: 'attachments',
      sharedStructuresKey: SHARED_STRUCTURES_KEY,
    });
    const version = meta.get('schemaVersion');
    if (typeof version === 'number') result.schemaVersion = version;
    const identity = meta.get('identity') as StoreIdentity | undefined;
    if (identity && typeof identity === 'object') result.identity = identity;
    const holder = new Map<string, string>();
    let rows = 0;
    for (const { key, value } of attachments.getRange()) {
      rows++;
      if (typeof key !== 'string' || !value || value.key !== key) {
        result.problems.push(`attachment row ${String(key)} does not hold its own key`);
        continue;
      }
      for (const ip of value.ips ?? []) {
        const other = holder.get(ip.address);
        if (other) result.problems.push(`address ${ip.address} is held by both ${other} and ${key}`);
        holder.set(ip.address, key);
      }
    }
    result.attachments = rows;
    result.addresses = holder.size;
  } catch (err) {
    result.problems.push(`cannot be read: ${(err as Error).message}`);
  } finally {
    await root?.close().catch(() => undefined);
  }
  result.ok = result.problems.length === 0;
  return result;
}
