import type { Etcd3, Lease } from 'etcd3';
import type { Logger } from '../../core/logger';
import type { NodeRecord } from '../../core/fabric/peer-source';
import { decodeRecord, encodeRecord } from './node-record';

// This node's record under a lease: it lives while the daemon keeps the lease alive, so a dead node is
// withdrawn everywhere without anyone deleting it. A lost lease (etcd unreachable for longer than its
// TTL) is granted again and the record put again once etcd answers.
//
// The record is written only over nothing, over our own, or over one this same daemon wrote on this
// boot before a restart (its old lease may still live): a second daemon given the same node name (a
// cloned VM boots with another boot id) must not redirect the node's traffic to itself. It waits
// instead, and says so, until the other's lease expires.
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
  private stopped = false;
  /** One publication at a time: the maintenance tick and an update may both ask. */
  private chain: Promise<unknown> = Promise.resolve();
  /** Why the record is not published, while another daemon's record holds the key. */
  refusal?: string;

  constructor(
    private readonly client: Etcd3,
    /** Full key of the record. */
    private readonly key: string,
    private readonly ttlSeconds: number,
    private readonly logger: Logger,
    /** Told when the lease is lost (etcd unreachable past the TTL, or the lease expired). */
    private readonly onLost: (err: Error) => void,
  ) {}

  /** Whether the record is written under a lease believed alive. */
  get published(): boolean {
    return this.written !== undefined && this.lease !== undefined && !this.lease.revoked();
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
    return this.published && this.written === encodeRecord(record);
  }

  private async ensureOnce(record: NodeRecord): Promise<boolean> {
    if (this.published) {
      if (this.written === encodeRecord(record)) return false;
      if (await this.replace(record)) return true;
    }
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
    const value = encodeRecord(record);
    const current = (await this.client.get(this.key).exec()).kvs[0];
    if (current && current.lease !== this.leaseId && !this.sameDaemon(current.value.toString(), record)) {
      const stored = current.value.toString().slice(0, 200);
      // A record without a lease never expires: no daemon writes one, so a person did.
      const refusal =
        current.lease === '0'
          ? `the node record ${this.key} was written without a lease (${stored}); this node is not ` +
            'announced until it is deleted (etcdctl del)'
          : `the node record ${this.key} is held by another daemon under the same node name ` +
            `(${stored}); this node is not announced until that record's lease expires: give one of ` +
            'the two daemons another --node-name, or stop the other one';
      if (this.refusal !== refusal) this.logger.error({ key: this.key }, refusal);
      this.refusal = refusal;
      return true;
    }
    const cmp = current
      ? this.client.if(this.key, 'Mod', '==', current.mod_revision)
      : this.client.if(this.key, 'Create', '==', 0);
    const res = await cmp.then(this.client.put(this.key).value(value).lease(this.leaseId!)).commit();
    // Lost a race with another writer: the next attempt reads who.
    if (!res.succeeded) return true;
    if (this.refusal) this.logger.info({ key: this.key }, 'node record free again; announcing this node');
    this.refusal = undefined;
    this.written = value;
    this.writtenAt = Number(res.header.revision);
    this.logger.info({ key: this.key, ttlSeconds: this.ttlSeconds }, 'published node record');
    return true;
  }

  /**
   * Puts `record` over the value we wrote, under the same lease; false when the stored value is no
   * longer ours (then the full path reads who holds the key).
   */
  private async replace(record: NodeRecord): Promise<boolean> {
    const value = encodeRecord(record);
    const res = await this.client
      .if(this.key, 'Mod', '==', this.writtenAt)
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

  /** A record of this same daemon before a restart: the same node on the same boot. */
  private sameDaemon(stored: string, record: NodeRecord): boolean {
    try {
      const prev = decodeRecord(record.node, stored).record;
      return record.bootId !== '' && prev.bootId === record.bootId;
    } catch {
      // Unreadable: nobody can route with it, and only this node's daemon writes its key.
      return true;
    }
  }
}
