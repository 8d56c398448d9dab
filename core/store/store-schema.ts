import type { Database } from 'lmdb';
import { failedPrecondition } from '../errors';

// The store's record layout across builds: the version this build writes, the oldest version that
// reads it, and the migrations from one version to the next. Its own file because it is a contract
// with other builds of the daemon (a rollback, an upgrade), which changes on its own rhythm: the
// store's reads and writes do not change when a migration is added, and a migration never needs them.

/** Version of the record layout written by this build. Bump it and add a migration when it changes. */
export const SCHEMA_VERSION = 2;

/**
 * The oldest schema whose builds read this build's stores correctly, written into every store this
 * build opens (meta key `minReaderSchema`). A rollback (`kubectl rollout undo`, a package downgrade)
 * puts an earlier build on the store a later one wrote: that build opens a store of a newer schema as
 * long as the store names a minimum reader it satisfies. Keep schema changes additive — new fields,
 * new keys that older builds ignore — and this stays at the schema of the last change that older
 * builds would misread; raise it only with such a change, and say so in the release notes. Schema 2
 * rows refer to shared record structures that a schema 1 build misreads, hence 2.
 */
export const MIN_READER_SCHEMA = 2;

/** Meta key of the minimum reader schema (MIN_READER_SCHEMA of the build that last opened the store). */
export const MIN_READER_KEY = 'minReaderSchema';

/** Meta key of the schema version recorded in the store. */
export const SCHEMA_VERSION_KEY = 'schemaVersion';

/** The store's databases, as a migration sees them. */
export interface Databases {
  attachments: Database<unknown, string>;
  meta: Database<unknown, string>;
}

/** Transforms the database from version N-1 to N inside one write transaction. */
type Migration = (dbs: Databases) => void;

// Index 0 is unused: migrations[N] upgrades a version N-1 store to version N. Version 1 is the first
// layout, so there is nothing to migrate to it.
const migrations: Migration[] = [];

// Version 2: attachment rows refer to shared record structures. Version 1 rows stay readable as they
// are, but a version 1 build would misread version 2 rows, hence the new version. Rewriting the rows
// gives an upgraded store the smaller rows at once instead of as attachments come and go.
migrations[2] = ({ attachments }) => {
  const rows = [...attachments.getRange()];
  for (const { key, value } of rows) void attachments.put(key, value);
};

/**
 * Refuses a store a newer build wrote unless it names a minimum reader this build satisfies (and the
 * identity every such build writes with it): throws a WorkloadNetError naming the store's directory.
 */
export function refuseUnreadableSchema(
  dir: string,
  found: number,
  minReader: unknown,
  hasIdentity: boolean,
): void {
  const readable = typeof minReader === 'number' && minReader <= SCHEMA_VERSION && hasIdentity;
  if (found <= SCHEMA_VERSION || readable) return;
  throw failedPrecondition(
    `the state store at ${dir} was written by a newer workloadnet (schema ${found}, this build ` +
      `understands up to ${SCHEMA_VERSION}` +
      (typeof minReader === 'number' ? `, and the store needs at least ${minReader}` : '') +
      `); downgrading is not supported: run the newer version or move the state directory aside`,
  );
}

/**
 * Runs the migrations from `found` up to this build's version and stamps the store with this build's
 * schema and minimum reader. Call it inside the write transaction that opens the store.
 */
export function migrateToCurrent(dbs: Databases, found: number): void {
  for (let v = found + 1; v <= SCHEMA_VERSION; v++) migrations[v]?.(dbs);
  dbs.meta.putSync(SCHEMA_VERSION_KEY, SCHEMA_VERSION);
  dbs.meta.putSync(MIN_READER_KEY, MIN_READER_SCHEMA);
}
