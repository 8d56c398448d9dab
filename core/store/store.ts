import { randomUUID } from 'node:crypto';
import * as os from 'node:os';
import * as path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { IpAssignment } from '../backend';
import type { Attachment } from '../workload-service';
import { failedPrecondition } from '../errors';
import { checkStoreFile } from './store-file-check';
import { prepareStateDir } from './store-room';
import { currentBootId } from '../../lib/boot-id';
import type { Logger } from '../logger';
import { StoreWriteHealth, type WriteHealth } from './store-write-health';

// The single source of truth for attachments and the addresses they hold. LMDB gives us ACID
// copy-on-write transactions (the same family as containerd's bbolt): an attachment row, with the
// addresses it holds, is written whole or not at all. (Stores written before this build also hold an
// address index, "allocations", that nothing reads any more; it is left as it is.)

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
const MIN_READER_KEY = 'minReaderSchema';

/** A stored attachment: the public view plus what only the daemon needs. */
export interface AttachmentRecord extends Attachment {
  /** Inode of the workload namespace when it was attached (detects a re-created namespace). */
  netnsInode: number;
  /**
   * Device of the directory the namespace path was found in at attach (absent in rows written before
   * it was recorded): the leak sweep trusts a path's absence only on that same mount (sweep-guard.ts).
   */
  netnsDirDev?: number;
  /**
   * The tunnel endpoint (DPU agent id) the backend's place() chose before the address was allocated:
   * whose slice the address came from, or who borrowed it (core/ipam/slice-book.ts); "" when the place
   * is no endpoint (a DPU that does not carry the fabric).
   */
  endpoint?: string;
  /**
   * The Attach call asked for this MTU (absent: it is the network's, which an interface follows when
   * it changes, see core/reconcile/mtu-alignment.ts).
   */
  mtuAsked?: boolean;
  /**
   * Written with the row while its dataplane is being programmed, and gone from the row that records
   * the backend's answer: a row that still has it at start-up is an attach cut short, whose caller was
   * told it failed (core/reconcile/cut-short.ts). Absent in every row older builds wrote: finished.
   */
  unfinished?: boolean;
}

/** The store's databases, as a migration sees them. */
interface Databases {
  attachments: Database<AttachmentRecord, string>;
  meta: Database<unknown, string>;
}

/** Transforms the database from version N-1 to N inside one write transaction. */
type Migration = (dbs: Databases) => void;

/**
 * Key under which the attachments database keeps the msgpack record structures (the property names of
 * each object shape) that its rows refer to. Without it every row carries its own property names: a
 * row took ~550 bytes instead of ~290, and decoding one built its structures afresh, so reading all
 * 10,000 rows (List, start-up) allocated ~48 MiB instead of ~15 and took 6 times as long. lmdb writes
 * a new structure in the same transaction as the first row that uses it.
 */
export const SHARED_STRUCTURES_KEY = Symbol.for('structures');

/**
 * Address space reserved for the memory map up front (virtual only: the file grows with the data, and
 * only pages that are read count as resident).
 */
const MAP_SIZE_BYTES = 1024 * 1024 * 1024;

/**
 * lmdb starts with a 128 KiB map and doubles it as the file grows, keeping every earlier map alive (a
 * value read earlier may still point into it). Pages read through an old map stay resident next to
 * their copies in the new one: at 10,000 attachments ~20 MiB of map was resident for a 10 MB file.
 * Reserving the map once keeps a single one. 32-bit builds keep lmdb's default, which grows in chunks
 * because their address space is too small to reserve.
 */
function mapSizeOption(): { mapSize?: number } {
  return ARCHES_64.has(process.arch) ? { mapSize: MAP_SIZE_BYTES } : {};
}

/** Values of process.arch with a 64-bit address space. */
const ARCHES_64 = new Set<string>(['x64', 'arm64', 'ppc64', 's390x', 'riscv64', 'loong64']);

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
 * How the node's ranges are cut among its tunnel endpoints (core/ipam/slice-book.ts): the slice count
 * the ranges were cut with, and each endpoint's slice index. Kept so that a restart gives every DPU the
 * slices it had: its pods' addresses stay routed to it.
 */
export interface StoredSlices {
  count: number;
  /** Endpoint (DPU agent) id → slice index. */
  endpoints: Record<string, number>;
}

/** Meta key of the StoredSlices. */
const FABRIC_SLICES_KEY = 'fabricSlices';
/** Meta key of this node's fabric tunnel addresses (core/ipam/tunnel-addresses.ts). */
const TUNNEL_ADDRESSES_KEY = 'fabricTunnelAddresses';

/** This node's fabric tunnel address per family, reserved from its own pools. */
export interface StoredTunnelAddresses {
  4?: string;
  6?: string;
}

/** Who created a store, recorded once when it is created, so that a new store is recognisable. */
export interface StoreIdentity {
  /** Random id of this store; a store restored from a backup keeps it, a new one never shares it. */
  storeId: string;
  /** Node (host) name that created the store. */
  node: string;
  /** ISO time of creation (for a store older than identities: when its identity was first recorded). */
  createdAt: string;
}

export interface StoreOptions {
  /** Node name recorded in a new store's identity; defaults to the host name. */
  node?: string;
  /** Where write failures and recoveries are reported. */
  logger?: Logger;
  /** How often a store whose writes fail retries with a probe write (ms). */
  writeProbeIntervalMs?: number;
  /** The kernel boot this daemon runs in; defaults to the kernel's boot id (lib/boot-id.ts). */
  bootId?: string;
}

/**
 * Meta key: the kernel boot in which a start-up reconcile last finished. Every row in the store was
 * written in that boot or an earlier one, since a daemon serves only after its reconcile.
 */
const RECONCILED_BOOT_KEY = 'reconciledBoot';

/**
 * Meta key present from the transaction that creates a store until the one that records its first
 * reconcile (with the rows it adopted): while it is there, the store is new.
 */
const NEW_UNTIL_RECONCILED_KEY = 'newUntilReconciled';

/**
 * Meta key: DPU agent id → when this store finished its first full sync with it. Created empty with a
 * new store (with the first reconcile's record); a store without it predates it.
 */
const ADOPTED_AGENTS_KEY = 'adoptedAgents';

/** Meta key prefix: a DPU agent id after it → that agent's fabric identity holders. */
const FABRIC_HOLDERS_PREFIX = 'dpuFabricHolders/';

/** The data file inside the state directory. */
export const STORE_FILE = 'workloadnet.mdb';

export class Store {
  private readonly health: StoreWriteHealth;
  private identityValue!: StoreIdentity;
  private isNewValue = false;
  private closed = false;
  private readonly bootId: string;
  /** Writes begun and not settled, and writes settled (see writeMark). */
  private writing = 0;
  private settled = 0;

  private constructor(
    /** Directory holding the store, for messages. */
    readonly dir: string,
    private readonly root: RootDatabase,
    private readonly attachments: Database<AttachmentRecord, string>,
    private readonly meta: Database<unknown, string>,
    opts: StoreOptions,
  ) {
    this.bootId = opts.bootId ?? currentBootId();
    this.health = new StoreWriteHealth(
      path.join(dir, STORE_FILE),
      () => this.root.transaction(() => void this.meta.put('writeProbe', Date.now())),
      opts.logger,
      opts.writeProbeIntervalMs,
    );
  }

  /**
   * Opens (creating if needed) the store under `stateDir`, migrating older layouts and refusing a
   * store written by a newer version of the daemon, or a data file that is damaged (checked before it
   * is mapped, since lmdb would crash on it).
   */
  static open(stateDir: string, opts: StoreOptions = {}): Store {
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
    const root = open({
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
    const store = new Store(
      stateDir,
      root,
      root.openDB<AttachmentRecord, string>({
        name: 'attachments',
        sharedStructuresKey: SHARED_STRUCTURES_KEY,
      }),
      root.openDB<unknown, string>({ name: 'meta' }),
      opts,
    );
    try {
      store.migrate(opts.node ?? os.hostname(), opts.logger);
    } catch (err) {
      void root.close();
      throw err;
    }
    return store;
  }

  /** The schema version recorded in the store. */
  get schemaVersion(): number {
    const v = this.meta.get('schemaVersion');
    return typeof v === 'number' ? v : 0;
  }

  /** Who created this store and when. */
  get identity(): StoreIdentity {
    return this.identityValue;
  }

  /**
   * True when no daemon has yet finished a start-up reconcile with this store: it was created by this
   * open, or by an earlier one that ended before recordFirstReconcile. Beside a dataplane that already
   * holds workloads, that means the state was lost, not that the workloads are orphans.
   */
  get isNew(): boolean {
    return this.isNewValue;
  }

  /**
   * True when every row was written in an earlier kernel boot than this one: the last reconcile
   * finished under another boot id. Namespaces do not survive a reboot, so those rows' workloads are
   * gone, even when the daemon cannot see their namespace paths. False when either boot is unknown.
   */
  get rowsFromEarlierBoot(): boolean {
    const last = this.meta.get(RECONCILED_BOOT_KEY);
    return typeof last === 'string' && last !== '' && this.bootId !== '' && last !== this.bootId;
  }

  /** Records that a start-up reconcile finished in this boot (see rowsFromEarlierBoot). */
  async recordReconciledBoot(): Promise<void> {
    if (this.meta.get(RECONCILED_BOOT_KEY) === this.bootId) return;
    await this.write(() => void this.meta.put(RECONCILED_BOOT_KEY, this.bootId));
  }

  /** Whether writes currently succeed; when not, since when and why. */
  writeHealth(): WriteHealth {
    return this.health.current;
  }

  private migrate(node: string, logger: Logger | undefined): void {
    const found = this.schemaVersion;
    const minReader = this.meta.get(MIN_READER_KEY);
    const identity = asIdentity(this.meta.get('identity'));
    // Every build that writes the minimum reader also writes the store's identity.
    const readable = typeof minReader === 'number' && minReader <= SCHEMA_VERSION && identity !== undefined;
    if (found > SCHEMA_VERSION && !readable) {
      throw failedPrecondition(
        `the state store at ${this.dir} was written by a newer workloadnet (schema ${found}, this build ` +
          `understands up to ${SCHEMA_VERSION}` +
          (typeof minReader === 'number' ? `, and the store needs at least ${minReader}` : '') +
          `); downgrading is not supported: run the newer version or move the state directory aside`,
      );
    }
    if (identity) this.identityValue = identity;
    // A store created by an earlier start that ended before its first reconcile was recorded is still
    // new: nothing it holds says which of the dataplane's workloads are ours.
    this.isNewValue = this.meta.get(NEW_UNTIL_RECONCILED_KEY) === true;
    if (found > SCHEMA_VERSION) {
      // A rollback onto a store that a newer build wrote and says stays readable: its rows are ours
      // plus fields we ignore. The stamps stay the newer build's, so that rolling forward again finds
      // the store as it left it.
      logger?.warn(
        { schema: found, minReaderSchema: minReader, buildSchema: SCHEMA_VERSION },
        'state store written by a newer workloadnet that older builds can read; opening it as it is',
      );
      return;
    }
    if (found === SCHEMA_VERSION && identity && minReader === MIN_READER_SCHEMA) return;
    const created = found === 0 && !identity && this.attachments.getCount() === 0;
    this.isNewValue ||= created;
    this.root.transactionSync(() => {
      const dbs = { attachments: this.attachments, meta: this.meta };
      for (let v = found + 1; v <= SCHEMA_VERSION; v++) migrations[v]?.(dbs);
      this.meta.putSync('schemaVersion', SCHEMA_VERSION);
      this.meta.putSync(MIN_READER_KEY, MIN_READER_SCHEMA);
      if (created) this.meta.putSync(NEW_UNTIL_RECONCILED_KEY, true);
      if (!identity) {
        this.identityValue = { storeId: randomUUID(), node, createdAt: new Date().toISOString() };
        this.meta.putSync('identity', this.identityValue);
      }
    });
  }

  /**
   * Ends the store's being new: writes the rows the first reconcile adopted and, in the same durable
   * transaction, that it is done. Until this commits, every start finds the store new again (a start
   * killed part-way through adopting leaves either all of this or none of it), so a link not yet
   * adopted is never taken for an orphan by the next start.
   */
  async recordFirstReconcile(
    adopted: readonly AttachmentRecord[],
    cursors: Record<string, string>,
  ): Promise<void> {
    if (!this.isNewValue) throw new Error('recordFirstReconcile: the store is not new');
    // transactionSync: unlike lmdb's asynchronous transaction, it aborts (writes nothing) when its
    // body throws part-way, e.g. on a row it cannot encode. It runs once, before the API serves.
    await this.tracked(() =>
      this.health.run(async () =>
        this.root.transactionSync(() => {
          for (const record of adopted) this.attachments.putSync(record.key, record);
          if (adopted.length > 0) this.meta.putSync('cursors', cursors);
          if (this.meta.get(ADOPTED_AGENTS_KEY) === undefined) this.meta.putSync(ADOPTED_AGENTS_KEY, {});
          this.meta.removeSync(NEW_UNTIL_RECONCILED_KEY);
        }),
      ),
    );
    this.isNewValue = false;
  }

  get(key: string): AttachmentRecord | undefined {
    return this.attachments.get(key);
  }

  /**
   * Attachments of one workload, by key range: keys are "<workload>/<ifname>" and workload ids cannot
   * contain '/', so they sort between "<workload>/" and "<workload>0" ('0' follows '/').
   */
  byWorkload(workloadId: string): AttachmentRecord[] {
    const out: AttachmentRecord[] = [];
    for (const { value } of this.attachments.getRange({ start: `${workloadId}/`, end: `${workloadId}0` }))
      out.push(value);
    return out;
  }

  /** Every attachment, read one at a time as the caller iterates (inside one read snapshot). */
  /**
   * Rows in key order, from the first or from the one after the key `after`. Reading holds an LMDB
   * read transaction until the generator finishes or is left, which a page of List does at once.
   */
  *rows(after?: string): Generator<AttachmentRecord> {
    for (const { key, value } of this.attachments.getRange(after === undefined ? {} : { start: after }))
      if (key !== after) yield value;
  }

  all(): AttachmentRecord[] {
    const out: AttachmentRecord[] = [];
    for (const { value } of this.attachments.getRange()) out.push(value);
    return out;
  }

  count(): number {
    return this.attachments.getCount();
  }

  /**
   * Writes an attachment (with the addresses it holds) in one durable transaction. Pool cursors (the
   * last address handed out per pool) ride along so that round-robin survives a restart.
   */
  async put(record: AttachmentRecord, cursors?: Record<string, string>): Promise<void> {
    await this.write(() => {
      void this.attachments.put(record.key, record);
      if (cursors) void this.meta.put('cursors', cursors);
    });
  }

  /**
   * Drops the unfinished mark of the row written at `createdAt`, if that row is still there with it:
   * a row detached, or attached again, since is left as it is. One durable transaction.
   */
  async markFinished(key: string, createdAt: string): Promise<void> {
    await this.write(() => {
      const row = this.attachments.get(key);
      if (!row?.unfinished || row.createdAt !== createdAt) return;
      const { unfinished: _unfinished, ...finished } = row;
      void this.attachments.put(key, finished);
    });
  }

  /**
   * The DPU agents this store has finished a first full sync with (core/reconcile/agent-adoption.ts),
   * or 'all' for a store that predates the record: it was trusted with every agent's ports.
   */
  adoptedAgents(): ReadonlySet<string> | 'all' {
    const v = this.meta.get(ADOPTED_AGENTS_KEY);
    if (!v || typeof v !== 'object') return this.isNewValue ? new Set() : 'all';
    return new Set(Object.keys(v as Record<string, unknown>));
  }

  /** Records a first full sync with an agent, in one durable transaction. */
  async recordAdoptedAgent(agentId: string): Promise<void> {
    await this.write(() => {
      const v = this.meta.get(ADOPTED_AGENTS_KEY);
      const record = v && typeof v === 'object' ? { ...(v as Record<string, string>) } : {};
      if (record[agentId] !== undefined) return;
      record[agentId] = new Date().toISOString();
      void this.meta.put(ADOPTED_AGENTS_KEY, record);
    });
  }

  /** Removes an attachment in one durable transaction; returns the addresses it held. */
  async remove(key: string): Promise<IpAssignment[]> {
    let released: IpAssignment[] = [];
    await this.write(() => {
      const previous = this.attachments.get(key);
      if (!previous) return;
      released = previous.ips;
      void this.attachments.remove(key);
    });
    return released;
  }

  /** Removes these attachments, whichever exist, in one durable transaction. */
  async removeAll(keys: readonly string[]): Promise<void> {
    await this.write(() => {
      for (const key of keys) void this.attachments.remove(key);
    });
  }

  /**
   * A database of its own in the same environment for a pool source's durable state (the etcd blocks
   * this node owns), so the node serves from it when the source's backing service is unreachable.
   */
  poolSourceState<V>(): Database<V, string> {
    return this.root.openDB<V, string>({ name: 'pool-source' });
  }

  /** The stored cut of the node's ranges, if one was recorded. */
  fabricSlices(): StoredSlices | undefined {
    const v = this.meta.get(FABRIC_SLICES_KEY);
    if (!v || typeof v !== 'object') return undefined;
    const { count, endpoints } = v as Record<string, unknown>;
    if (typeof count !== 'number' || !endpoints || typeof endpoints !== 'object') return undefined;
    const out: Record<string, number> = {};
    for (const [id, i] of Object.entries(endpoints as Record<string, unknown>))
      if (typeof i === 'number' && Number.isInteger(i) && i >= 0) out[id] = i;
    return { count, endpoints: out };
  }

  /** Records the cut in one durable transaction. */
  async putFabricSlices(slices: StoredSlices): Promise<void> {
    await this.write(() => void this.meta.put(FABRIC_SLICES_KEY, slices));
  }

  /** The tunnel addresses reserved for the fabric, as last recorded (empty when none). */
  tunnelAddresses(): StoredTunnelAddresses {
    const v = this.meta.get(TUNNEL_ADDRESSES_KEY);
    if (!v || typeof v !== 'object') return {};
    const out: StoredTunnelAddresses = {};
    for (const f of [4, 6] as const) {
      const a = (v as Record<string, unknown>)[f];
      if (typeof a === 'string') out[f] = a;
    }
    return out;
  }

  /** Records them in one durable transaction; empty removes the record. */
  async putTunnelAddresses(addresses: StoredTunnelAddresses): Promise<void> {
    const empty = addresses[4] === undefined && addresses[6] === undefined;
    await this.write(
      () =>
        void (empty
          ? this.meta.remove(TUNNEL_ADDRESSES_KEY)
          : this.meta.put(TUNNEL_ADDRESSES_KEY, addresses)),
    );
  }

  cursors(): Record<string, string> {
    const c = this.meta.get('cursors');
    return c && typeof c === 'object' ? (c as Record<string, string>) : {};
  }

  /**
   * The DPU fabric's identity holders for one agent as last recorded (backends/dpu/fabric-holders.ts
   * checks the shape), or undefined.
   */
  fabricHolders(agentId: string): unknown {
    return this.meta.get(`${FABRIC_HOLDERS_PREFIX}${agentId}`);
  }

  /** Records them in one durable transaction; undefined removes the record. */
  async putFabricHolders(agentId: string, value: unknown): Promise<void> {
    const key = `${FABRIC_HOLDERS_PREFIX}${agentId}`;
    await this.write(() => void (value === undefined ? this.meta.remove(key) : this.meta.put(key, value)));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.health.stop();
    await this.root.close();
  }

  /**
   * One durable write transaction. A full or failing disk rejects it with a WorkloadNetError naming the
   * store (see store-write-health.ts) and never ends the process; so does a write after close (a
   * background writer finishing late), which lmdb would throw outside any caller.
   */
  private write(body: () => void): Promise<void> {
    if (this.closed) return Promise.reject(failedPrecondition(`the state store in ${this.dir} is closed`));
    return this.tracked(() => this.health.run(() => this.root.transaction(body)));
  }

  /**
   * Moves whenever a write of this process settles; undefined while one is under way. A row read while
   * it is defined and has not moved since is what the store holds (core/store/row-cache.ts).
   */
  get writeMark(): number | undefined {
    return this.writing > 0 ? undefined : this.settled;
  }

  private async tracked(write: () => Promise<void>): Promise<void> {
    this.writing++;
    try {
      await write();
    } finally {
      this.writing--;
      this.settled++;
    }
  }
}

function asIdentity(v: unknown): StoreIdentity | undefined {
  if (!v || typeof v !== 'object') return undefined;
  const { storeId, node, createdAt } = v as Record<string, unknown>;
  if (typeof storeId !== 'string' || typeof node !== 'string' || typeof createdAt !== 'string')
    return undefined;
  return { storeId, node, createdAt };
}

/** The daemon's one store (DI token). */
export const STORE = Symbol.for('workloadnet.Store');
