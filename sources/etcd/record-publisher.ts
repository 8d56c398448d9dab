import type { Etcd3, Lease } from 'etcd3';
import type { Logger } from '../../core/logger';
import type { NodeRecord } from '../../core/peer-source';
import { describeHolder, parseAliveHolder, sameDaemon, type AliveHolder } from './alive-key';
import { encodeRecord } from './node-record';

// This node's record under a lease: it lives while the daemon keeps the lease alive, so a dead node is
// withdrawn everywhere without anyone deleting it. A lost lease (etcd unreachable for longer than its
// TTL) is granted again and the record put again once etcd answers.
//
// One daemon speaks for a node name: the one whose store and boot its alive key names (alive-key.ts,
// taken by the pool source). The record is put only in a transaction that also finds the alive key
// still holding the value read as this daemon's, so a second daemon given the same --node-name (a
// cloned VM, or another namespace on the same kernel with its own state) writes nothing and says who
// holds the name, whatever the boot. The holder writes over whatever else is under the key: a record
// without a lease (no daemon writes one: a person or an impostor did, and peers ignore it), a record of
// a daemon that no longer holds the name, or its own from before a restart (its old lease may still
// live: peers see one record replace the other, never the node withdrawn in between).
//
// The record carries this daemon's stamp (store id and boot, as its alive key names it): peers use a
// record only when its stamp names the name's current holder (peer-table.ts), so a record someone else
// put under the key (a clone that raced a write in, an older daemon, another program with a lease) is
// not routed in the moment before the holder writes its own back. A stamp rather than the alive key's
// own lease: the record keeps its lease of fabric.leaseTtlSeconds (15 s), so a dead node is withdrawn
// when it always was, and a lost alive key (pool source) does not take the record with it.
//
// A changed record (a DPU came or went, a slice was borrowed from) is put over our own under the same
// lease, in one transaction that holds only while the stored value is still the one we wrote: peers see
// the new record replace the old, never the node withdrawn in between.

export class RecordPublisher {
  private lease?: Lease;
  private leaseId?: string;
  private written?: string;
  /** Revision of the write. */
  writtenAt = 0;
  /** The alive key's value when the record was written: the holder the record is tied to. */
  private heldAs?: string;
  private stopped = false;
  /** One publication at a time: the maintenance tick and an update may both ask. */
  private chain: Promise<unknown> = Promise.resolve();
  /** Why the record is not published: this daemon does not hold the node name (yet). */
  refusal?: string;

  constructor(
    private readonly client: Etcd3,
    /** Full key of the record. */
    private readonly key: string,
    /** Full key of the node name's alive key, and this daemon as it names itself there. */
    private readonly holder: { key: string; me: AliveHolder },
    private readonly ttlSeconds: number,
    private readonly logger: Logger,
    /** Told when the lease is lost (etcd unreachable past the TTL, or the lease expired). */
    private readonly onLost: (err: Error) => void,
  ) {}

  /** Whether the record is written under a lease believed alive. */
  get published(): boolean {
    return this.written !== undefined && this.lease !== undefined && !this.lease.revoked();
  }

  /** The lease the record is written under, while it is believed stored. */
  get leaseOfRecord(): string | undefined {
    return this.written === undefined ? undefined : this.leaseId;
  }

  /** The stored record no longer is ours (deleted by hand, or overwritten): write it again. */
  forget(): void {
    this.written = undefined;
  }

  /**
   * Publishes `record` when it is not (yet, or any more); throws when etcd fails. True when it talked
   * to etcd (so etcd answered), false when there was nothing to do.
   */
  ensure(record: NodeRecord): Promise<boolean> {
    const next = this.chain.then(() => this.ensureOnce(record));
    this.chain = next.catch(() => undefined);
    return next;
  }

  /** Whether `record` is what is published now. */
  holds(record: NodeRecord): boolean {
    return this.published && this.written === this.encode(record);
  }

  private async ensureOnce(record: NodeRecord): Promise<boolean> {
    if (this.published) {
      if (this.written === this.encode(record)) return false;
      if (await this.replace(record)) return true;
    }
    const alive = await this.heldHere(record.node);
    if (alive === undefined) return true;
    if (!this.lease || this.lease.revoked()) {
      const lease = this.client.lease(this.ttlSeconds, { autoKeepAlive: true });
      lease.on('lost', (err: Error) => {
        if (this.lease !== lease) return;
        this.lease = undefined;
        this.leaseId = undefined;
        this.written = undefined;
        this.onLost(err);
      });
      let id: string;
      try {
        id = await lease.grant();
      } catch (err) {
        lease.release();
        throw err;
      }
      // Stopped meanwhile: nobody would keep this lease, so never start keeping it alive.
      if (this.stopped) {
        lease.release();
        return true;
      }
      this.lease = lease;
      this.leaseId = id;
    }
    const value = this.encode(record);
    const current = (await this.client.get(this.key).exec()).kvs[0];
    const res = await this.client
      .if(this.holder.key, 'Value', '==', alive)
      .and(this.key, current ? 'Mod' : 'Create', '==', current ? current.mod_revision : 0)
      .then(this.client.put(this.key).value(value).lease(this.leaseId!))
      .commit();
    // The name changed hands, or another writer came between: the next attempt reads again.
    if (!res.succeeded) return true;
    if (current && current.lease !== this.leaseId) this.tellReplaced(current.lease, current.value);
    if (this.refusal) this.logger.info({ key: this.key }, 'this daemon holds the node name; announcing it');
    this.refusal = undefined;
    this.written = value;
    this.writtenAt = Number(res.header.revision);
    this.heldAs = alive;
    this.logger.info({ key: this.key, ttlSeconds: this.ttlSeconds }, 'published node record');
    return true;
  }

  /**
   * The alive key's value when it names this daemon; undefined, with the refusal set and said, when
   * it names another daemon or does not exist yet (the pool source takes it).
   */
  private async heldHere(node: string): Promise<string | undefined> {
    const value = (await this.client.get(this.holder.key).string()) ?? undefined;
    const holder = value === undefined ? undefined : parseAliveHolder(value);
    const me = this.holder.me;
    if (holder && sameDaemon(holder, me)) return value;
    const refusal =
      value === undefined
        ? `node record ${this.key} not published: this daemon does not hold node name ${node} yet ` +
          `(its alive key ${this.holder.key} does not exist; the etcd pool source takes it)`
        : `node name ${node} is held by ${describeHolder(holder)} (alive key ${this.holder.key}): this ` +
          `daemon (store ${me.store}) publishes no node record for ${node}; give one of the two ` +
          'daemons another --node-name, or stop the other one';
    if (this.refusal !== refusal) {
      if (value === undefined) this.logger.info({ key: this.key }, refusal);
      else this.logger.error({ key: this.key, holder: value }, refusal);
    }
    this.refusal = refusal;
    return undefined;
  }

  /** `record` as this daemon stores it: stamped with the store and boot its alive key names. */
  private encode(record: NodeRecord): string {
    return encodeRecord(record, this.holder.me);
  }

  /** Says what the holder's write replaced, when it was not this run's own record. */
  private tellReplaced(lease: string, stored: Buffer): void {
    const text = stored.toString().slice(0, 200);
    if (lease === '0')
      this.logger.warn(
        { key: this.key, stored: text },
        'node record was written without a lease (no daemon writes one; peers ignore it); ' +
          "replaced it with this node's record under its lease",
      );
    else
      this.logger.info(
        { key: this.key, lease, stored: text },
        'replaced a node record under another lease: an earlier holder of the name (this daemon ' +
          'before a restart, or a daemon that no longer holds it), or a writer that never held it ' +
          "(peers use only the holder's record)",
      );
  }

  /**
   * Puts `record` over the value we wrote, under the same lease, while this daemon still holds the
   * name; false when either changed (then the full path reads who holds the key).
   */
  private async replace(record: NodeRecord): Promise<boolean> {
    const value = this.encode(record);
    const res = await this.client
      .if(this.key, 'Mod', '==', this.writtenAt)
      .and(this.holder.key, 'Value', '==', this.heldAs!)
      .then(this.client.put(this.key).value(value).lease(this.leaseId!))
      .commit();
    if (!res.succeeded) {
      this.forget();
      return false;
    }
    this.written = value;
    this.writtenAt = Number(res.header.revision);
    this.logger.info({ key: this.key }, 'node record updated under its lease');
    return true;
  }

  /** The value this daemon wrote, while it believes it is stored. */
  get value(): string | undefined {
    return this.written;
  }

  /** Stops keeping the lease alive, without revoking it: the record lives until the TTL runs out. */
  stop(): void {
    this.stopped = true;
    const lease = this.lease;
    this.lease = undefined;
    lease?.release();
  }
}
