import * as path from 'node:path';
import { open } from 'lmdb';
import { STORE_FILE } from '../../core/store/store';

/**
 * Pretends a (closed) store was written by another version of the daemon: writes its schema version
 * key through lmdb directly, as that version would have.
 */
export async function setStoreSchemaVersion(stateDir: string, version: number): Promise<void> {
  const root = open({ path: path.join(stateDir, STORE_FILE), compression: false });
  root.openDB<unknown, string>({ name: 'meta' }).putSync('schemaVersion', version);
  await root.close();
}
