import * as path from 'node:path';
import { open } from 'lmdb';
import { STORE_FILE } from '../../core/store/store-environment';

/**
 * Pretends a (closed) store was written by another version of the daemon: writes its schema version
 * key (and, when given, the oldest schema that may read it) through lmdb directly, as that version would.
 */
export async function setStoreSchemaVersion(
  stateDir: string,
  version: number,
  minReaderSchema?: number,
): Promise<void> {
  const root = open({ path: path.join(stateDir, STORE_FILE), compression: false });
  const meta = root.openDB<unknown, string>({ name: 'meta' });
  meta.putSync('schemaVersion', version);
  if (minReaderSchema !== undefined) meta.putSync('minReaderSchema', minReaderSchema);
  await root.close();
}
