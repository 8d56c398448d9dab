// The kernel's nf_tables notifications (NETLINK_NETFILTER, group NFNLGRP_NFTABLES), read as
// transactions: a committed transaction is announced as one message per object it changed (table,
// chain, rule, set, element, ...), then NFT_MSG_NEWGEN. The kernel sends them under its commit lock, so
// two transactions never interleave on a socket. Every object message's first attribute (NFTA_*_TABLE,
// type 1) names its table, which is all a monitor of one table needs.

import { attributeMap, getString } from '../rtnetlink/attributes';
import type { NetlinkMessage } from '../rtnetlink/message';
import { NFPROTO_INET } from './nf-elements';

export const NETLINK_NETFILTER = 12;
export const NFNLGRP_NFTABLES = 7;
export const NFNL_SUBSYS_NFTABLES = 10;
export const NFT_MSG_NEWGEN = 15;
export const NFT_MSG_GETGEN = 16;
const NFTA_TABLE = 1;
const NFGENMSG_LEN = 4;

/** Follows one table's transactions through a stream of notifications. */
export class TableTransactions {
  private touched = false;

  constructor(
    private readonly table: string,
    private readonly family: number = NFPROTO_INET,
  ) {}

  /** Reads messages in order; returns how many transactions that changed the table they ended. */
  read(messages: readonly NetlinkMessage[]): number {
    let ended = 0;
    for (const msg of messages) {
      if (msg.type >> 8 !== NFNL_SUBSYS_NFTABLES) continue;
      if ((msg.type & 0xff) === NFT_MSG_NEWGEN) {
        if (this.touched) ended++;
        this.touched = false;
      } else if (!this.touched && this.concerns(msg)) this.touched = true;
    }
    return ended;
  }

  /** Notifications were lost: a transaction half heard is forgotten (the loss is reported anyway). */
  reset(): void {
    this.touched = false;
  }

  private concerns(msg: NetlinkMessage): boolean {
    if (msg.payload.length < NFGENMSG_LEN || msg.payload.readUInt8(0) !== this.family) return false;
    const name = attributeMap(msg.payload.subarray(NFGENMSG_LEN)).get(NFTA_TABLE);
    return name !== undefined && getString(name) === this.table;
  }
}
