import * as os from 'node:os';
import * as path from 'node:path';
import type { Database, RootDatabase } from 'lmdb';
import type { IpAssignment } from '../backend';
import { SHARED_STRUCTURES_KEY, type AttachmentRecord } from './attachment-record';
import { failedPrecondition } from '../errors';
import { STORE_FILE, openEnvironment } from './store-environment';
import { currentBootId } from '../../lib/boot-id';
import type { Logger } from '../logger';
import { StoreWriteHealth, type WriteHealth } from './store-write-health';
import {
  MIN_READER_KEY,
  MIN_READER_SCHEMA,
  SCHEMA_VERSION,
  SCHEMA_VERSION_KEY,
  migrateToCurrent,
  refuseUnreadableSchema,
} from './store-schema';
import {
  ADOPTED_AGENTS_KEY,
  NEW_UNTIL_RECONCILED_KEY,
  RECONCILED_BOOT_KEY,
  asAdoptedAgents,
  isEarlierBoot,
  withAdoptedAgent,
} from './reconcile-records';
import { IDENTITY_KEY, asIdentity, newIdentity, type StoreIdentity } from './store-identity';
import {
  FABRIC_SLICES_KEY,
  TUNNEL_ADDRESSES_KEY,
  asStoredSlices,
  asStoredTunnelAddresses,
  fabricHoldersKey,
  type StoredSlices,
  type StoredTunnelAddresses,
} from './fabric-records';

// The single source of truth for attachments and the addresses they hold. LMDB gives us ACID
// copy-on-write transactions (the same family as containerd's bbolt): an attachment row, with the
// addresses it holds, is written whole or not at all. (Stores written before this build also hold an
// address index, "allocations", that nothing reads any more; it is left as it is.)

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
    const root = openEnvironment(stateDir);
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
    const v = this.meta.get(SCHEMA_VERSION_KEY);
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
    return isEarlierBoot(this.meta.get(RECONCILED_BOOT_KEY), this.bootId);
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
    const identity = asIdentity(this.meta.get(IDENTITY_KEY));
    // Every build that writes the minimum reader also writes the store's identity.
    refuseUnreadableSchema(this.dir, found, minReader, identity !== undefined);
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
      migrateToCurrent({ attachments: this.attachments, meta: this.meta }, found);
      if (created) this.meta.putSync(NEW_UNTIL_RECONCILED_KEY, true);
      if (!identity) {
        this.identityValue = newIdentity(node);
        this.meta.putSync(IDENTITY_KEY, this.identityValue);
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
    return asAdoptedAgents(this.meta.get(ADOPTED_AGENTS_KEY), this.isNewValue);
  }

  /** Records a first full sync with an agent, in one durable transaction. */
  async recordAdoptedAgent(agentId: string): Promise<void> {
    await this.write(() => {
      const record = withAdoptedAgent(this.meta.get(ADOPTED_AGENTS_KEY), agentId);
      if (record === undefined) return;
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
    return asStoredSlices(this.meta.get(FABRIC_SLICES_KEY));
  }

  /** Records the cut in one durable transaction. */
  async putFabricSlices(slices: StoredSlices): Promise<void> {
    await this.write(() => void this.meta.put(FABRIC_SLICES_KEY, slices));
  }

  /** The tunnel addresses reserved for the fabric, as last recorded (empty when none). */
  tunnelAddresses(): StoredTunnelAddresses {
    return asStoredTunnelAddresses(this.meta.get(TUNNEL_ADDRESSES_KEY));
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
    return this.meta.get(fabricHoldersKey(agentId));
  }

  /** Records them in one durable transaction; undefined removes the record. */
  async putFabricHolders(agentId: string, value: unknown): Promise<void> {
    const key = fabricHoldersKey(agentId);
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

/** The daemon's one store (DI token). */
export const STORE = Symbol.for('workloadnet.Store');
