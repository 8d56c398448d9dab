import * as os from 'node:os';
import { currentBootId } from '../../lib/boot-id';

// Who holds a node name. Block keys name only the node, so two daemons started with one --node-name
// (a cloned VM, a reused host name) would both serve its blocks and hand out the same addresses. The
// alive key therefore says which daemon holds the name, and only that daemon serves the name's blocks.
//
// A daemon is its state: the store's id, which a restart keeps, so a daemon restarted while its old
// lease still lives takes its own key back. A cloned VM's disk carries the same store id, so the boot
// id is part of it too: a clone runs on another boot. The same daemon after a reboot is refused until
// its previous lease expires (seconds), then takes the free key.
//
// The holder also stamps the node record it writes with the same store and boot (node-record.ts), and
// says so in its alive key (stampsRecord): peers then use a record under the name only when its stamp
// names the alive key's holder. A holder that does not say so is a daemon of an earlier version, whose
// records carry no stamp; peers take its unstamped records as before (see peer-table.ts).

/** Which daemon: what a node record's stamp carries, and what two holders are compared on. */
export interface HolderStamp {
  /** The holder's store id (core/store/store-identity.ts, StoreIdentity). */
  store: string;
  /** The holder's kernel boot id. */
  boot: string;
}

export interface AliveHolder extends HolderStamp {
  /** For people reading Status: where the holder runs. */
  host: string;
  pid: number;
  since: string;
  /** The holder stamps the node record it writes: a record under its name without its stamp is not its. */
  stampsRecord: boolean;
}

/** This daemon as it writes itself into its alive key. */
export function aliveHolder(storeId: string): AliveHolder {
  return {
    store: storeId,
    boot: currentBootId(),
    host: os.hostname(),
    pid: process.pid,
    since: new Date().toISOString(),
    stampsRecord: true,
  };
}

/**
 * The holder an alive key's value names; undefined for one that names none (a daemon of an earlier
 * version), which counts as another daemon's until it expires.
 */
export function parseAliveHolder(value: string): AliveHolder | undefined {
  try {
    const v = JSON.parse(value) as Partial<AliveHolder> | null;
    if (typeof v?.store !== 'string' || typeof v.boot !== 'string') return undefined;
    return {
      store: v.store,
      boot: v.boot,
      host: typeof v.host === 'string' ? v.host : '?',
      pid: typeof v.pid === 'number' ? v.pid : 0,
      since: typeof v.since === 'string' ? v.since : '?',
      stampsRecord: v.stampsRecord === true,
    };
  } catch {
    return undefined;
  }
}

/** Whether two holders are one daemon: the same state on the same boot (a restart, not a clone). */
export function sameDaemon(a: HolderStamp, b: HolderStamp): boolean {
  return a.store === b.store && a.boot === b.boot;
}

export function describeHolder(h: AliveHolder | undefined): string {
  if (!h) return 'a daemon that does not say which';
  return `the daemon of store ${h.store} on host ${h.host} (pid ${h.pid}, since ${h.since})`;
}
