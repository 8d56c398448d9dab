import type { Etcd3, Lease } from 'etcd3';
import { aliveHolder, parseAliveHolder, sameDaemon } from '../../../sources/etcd/alive-key';
import { BlockRegistry } from '../../../sources/etcd/block-registry';

// The node name's alive key as the etcd pool source holds it (alive-key.ts), for tests that run a peer
// source without a pool source beside it: only the daemon the key names publishes the name's record.

export interface HeldName {
  /** The alive key's value as written. */
  value: string;
  /** A clean stop, as the pool source's: the key deleted (if still ours), the lease revoked. */
  drop(): Promise<void>;
}

/**
 * Takes `node`'s alive key for the daemon of `storeId` on this boot, under a lease kept alive (TTL s),
 * over nothing or over the same daemon's; fails when another daemon holds it.
 */
export async function holdName(
  client: Etcd3,
  prefix: string,
  node: string,
  storeId: string,
  ttlSeconds = 2,
): Promise<HeldName> {
  const registry = new BlockRegistry(client, prefix);
  const me = aliveHolder(storeId);
  const value = JSON.stringify(me);
  const current = await registry.alive(node);
  const holder = current === undefined ? undefined : parseAliveHolder(current);
  if (current !== undefined && !(holder && sameDaemon(holder, me)))
    throw new Error(`node name ${node} is held by another daemon (${current})`);
  const lease: Lease = registry.ns.lease(ttlSeconds, { autoKeepAlive: true });
  if (!(await registry.takeAlive(node, current, value, await lease.grant()))) {
    await lease.revoke().catch(() => undefined);
    throw new Error(`node name ${node} was taken while this test took it`);
  }
  return {
    value,
    drop: async () => {
      await registry.dropAlive(node, value).catch(() => undefined);
      await lease.revoke().catch(() => undefined);
    },
  };
}
