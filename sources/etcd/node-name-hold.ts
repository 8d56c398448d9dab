// The node name's alive key in etcd, bound to a lease this daemon keeps alive: while this daemon holds
// it, it serves and claims the name's blocks; while another live daemon holds it, this one serves none
// and says why (alive-key.ts says what the key holds). Its own file because holding the name is the
// guard of everything the pool source writes under it, with its own life (a lease lost, a restart of
// the same daemon, a clone).

import type { Lease } from 'etcd3';
import type { Logger } from '../../core/logger';
import type { Store } from '../../core/store/store';
import { aliveHolder, describeHolder, parseAliveHolder, sameDaemon } from './alive-key';
import type { BlockRegistry } from './block-registry';

export interface NodeNameHoldOptions {
  nodeName: string;
  /** Whose store this daemon runs on: the alive key names it. */
  store: Store;
  /** TTL of the alive key's lease. */
  ttlSeconds: number;
  logger: Logger;
  /** etcd answered. */
  reachable: () => void;
  /** etcd failed (the lease was lost). */
  failed: (err: unknown) => void;
}

export class NodeNameHold {
  private lease?: Lease;
  /** What this daemon wrote into the node name's alive key, while it holds the key. */
  value?: string;
  /** Why this daemon serves none of the name's blocks: another live daemon holds the name. */
  refusal?: string;

  constructor(private readonly o: NodeNameHoldOptions) {}

  /**
   * Holds the node name's lease-bound alive key: takes it when it is free, or held by this same daemon
   * before a restart (its old lease may still live), and again when the lease was lost. While another
   * live daemon holds it, this one is not ready and writes nothing under the name (alive-key.ts).
   */
  async keep(registry: BlockRegistry): Promise<void> {
    if (this.lease && !this.lease.revoked() && this.value !== undefined) return;
    const node = this.o.nodeName;
    const me = aliveHolder(this.o.store.identity.storeId);
    const current = await registry.alive(node);
    const holder = current === undefined ? undefined : parseAliveHolder(current);
    if (current !== undefined && !(holder && sameDaemon(holder, me))) {
      const refusal =
        `node name ${node} is held by ${describeHolder(holder)}, whose alive key exists in etcd: this ` +
        `daemon serves and claims none of ${node}'s blocks; give one of the two daemons another ` +
        '--node-name, or stop the other one';
      if (this.refusal !== refusal) this.o.logger.error({ node, holder: current }, refusal);
      this.refusal = refusal;
      this.o.reachable();
      return;
    }
    const lease = registry.ns.lease(this.o.ttlSeconds, { autoKeepAlive: true });
    lease.on('lost', (err) => {
      if (this.lease === lease) {
        this.lease = undefined;
        this.value = undefined;
      }
      this.o.failed(err);
    });
    lease.on('keepaliveSucceeded', () => this.o.reachable());
    const value = JSON.stringify(me);
    let taken = false;
    try {
      taken = await registry.takeAlive(node, current, value, await lease.grant());
    } finally {
      // Another daemon wrote the key between our read and our write: the next tick reads which.
      if (!taken) await lease.revoke().catch(() => undefined);
    }
    if (!taken) return;
    this.lease = lease;
    this.value = value;
    if (this.refusal) this.o.logger.info({ node }, 'node name free again; serving its blocks');
    this.refusal = undefined;
    this.o.reachable();
  }

  /**
   * A clean stop says "not alive" at once; the blocks stay ours. Only the key's holder deletes it,
   * and only while it holds the value this daemon wrote; the lease's keys go with the lease.
   */
  async release(registry: BlockRegistry | undefined): Promise<void> {
    if (this.value) await registry?.dropAlive(this.o.nodeName, this.value).catch(() => undefined);
    await this.lease?.revoke().catch(() => undefined);
  }
}
