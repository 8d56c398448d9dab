// Set elements added and deleted over nf_tables netlink directly: one nfnetlink batch
// (NFNL_MSG_BATCH_BEGIN, NFT_MSG_NEWSETELEM / NFT_MSG_DELSETELEM, NFNL_MSG_BATCH_END) on a
// NETLINK_NETFILTER socket, which the kernel commits whole or not at all, like nft's own.
//
// Why not libnftables for these: it rebuilds its cache before every command, and for `add element` that
// cache is every table, chain, set and named object of the family (it must resolve verdict maps' jumps):
// at a thousand pods, ~20 ms per change, all of it spent before the one message that matters. A pod's
// label change is an element change, the commonest change there is, so it is encoded here by hand with
// the project's netlink codec (lib/rtnetlink), and libnftables keeps everything else (chains, rules, and
// every read). Written this way: elements of plain hash sets of addresses, and of sets and verdict maps
// keyed by interface name (a pod whose rules a chain already holds is a map element that jumps to it);
// an interval set's elements are ranges nft computes, and those stay with nft.
//
// The socket is made in the namespace the table lives in (a socket belongs to the namespace of the
// thread that created it), and I/O runs on the libuv threadpool, so the event loop never waits.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { addressToBytes } from '../cidr';
import { AF_NETLINK, SOCK_CLOEXEC, SOCK_RAW, closeFd, socket } from '../libc';
import type { Netns } from '../netns/netns-handle';
import { attrBytes, attrNest, attrString, encodeAttributes } from '../rtnetlink/attributes';
import { NetlinkError, decodeErrorMessage } from '../rtnetlink/errors';
import {
  NLM_F_ACK,
  NLM_F_CREATE,
  NLM_F_REQUEST,
  NLMSG_ERROR,
  decodeMessages,
  encodeMessages,
  type NetlinkMessage,
} from '../rtnetlink/message';
import { configureNetlinkFd } from '../rtnetlink/socket';
import { NftablesError } from './libnftables';

const NETLINK_NETFILTER = 12;
const NFNL_SUBSYS_NFTABLES = 10;
const NFNL_MSG_BATCH_BEGIN = 0x10;
const NFNL_MSG_BATCH_END = 0x11;
const NFT_MSG_NEWSETELEM = 12;
const NFT_MSG_DELSETELEM = 14;
const NFTA_SET_ELEM_LIST_TABLE = 1;
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_LIST_ELEM = 1;
const NFTA_SET_ELEM_KEY = 1;
const NFTA_SET_ELEM_DATA = 2;
const NFTA_DATA_VALUE = 1;
const NFTA_DATA_VERDICT = 2;
const NFTA_VERDICT_CODE = 1;
const NFTA_VERDICT_CHAIN = 2;
/** NFT_JUMP, as the kernel reads it: a 32-bit big-endian -3. */
const NFT_JUMP_BE = Buffer.from([0xff, 0xff, 0xff, 0xfd]);
/** IFNAMSIZ: nft's `ifname` type is the name, NUL-padded to 16 bytes. */
const IFNAMSIZ = 16;
/** nfgenmsg.nfgen_family of an `inet` table. */
export const NFPROTO_INET = 1;
const RECEIVE_SIZE = 64 * 1024;
/** Elements per message, so that one batch stays far below a datagram's limit. */
const ELEMENTS_PER_MESSAGE = 512;

/** The elements of one hash set or map to add and to delete. */
export interface ElementChange {
  set: string;
  /** What the keys are: addresses, canonical text (the default), or interface names. */
  keys?: 'address' | 'ifname';
  add: readonly string[];
  delete: readonly string[];
  /** For a verdict map: the chain each key added jumps to. */
  jumps?: ReadonlyMap<string, string>;
}

function keyBytes(keys: ElementChange['keys'], key: string): Buffer {
  if (keys !== 'ifname') return addressToBytes(key);
  const b = Buffer.alloc(IFNAMSIZ);
  if (b.write(key, 'utf8') >= IFNAMSIZ) throw new NftablesError(`interface name ${key} is too long`);
  return b;
}

/** struct nfgenmsg: family, version 0, res_id (big-endian). */
function nfgenmsg(family: number, resId: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt8(family, 0);
  b.writeUInt16BE(resId, 2);
  return b;
}

function elementList(change: ElementChange, table: string, keys: readonly string[], adding: boolean): Buffer {
  const elements = keys.map((k) => {
    const attrs = [attrNest(NFTA_SET_ELEM_KEY, [attrBytes(NFTA_DATA_VALUE, keyBytes(change.keys, k))])];
    const chain = adding ? change.jumps?.get(k) : undefined;
    if (chain !== undefined)
      attrs.push(
        attrNest(NFTA_SET_ELEM_DATA, [
          attrNest(NFTA_DATA_VERDICT, [
            attrBytes(NFTA_VERDICT_CODE, NFT_JUMP_BE),
            attrString(NFTA_VERDICT_CHAIN, chain),
          ]),
        ]),
      );
    return attrNest(NFTA_LIST_ELEM, attrs);
  });
  const set = change.set;
  return encodeAttributes([
    attrString(NFTA_SET_ELEM_LIST_TABLE, table),
    attrString(NFTA_SET_ELEM_LIST_SET, set),
    attrNest(NFTA_SET_ELEM_LIST_ELEMENTS, elements),
  ]);
}

function chunks<T>(list: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += ELEMENTS_PER_MESSAGE)
    out.push(list.slice(i, i + ELEMENTS_PER_MESSAGE));
  return out;
}

/** A NETLINK_NETFILTER socket in one namespace that writes set elements, one batch at a time. */
export class NfElementWriter {
  private seq: number = crypto.randomInt(1, 0x7fffffff);
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(
    private readonly fd: number,
    private readonly family: number,
  ) {}

  /** A writer acting in `netns` (the calling process's own namespace when absent). */
  static open(netns?: Netns, family = NFPROTO_INET): NfElementWriter {
    const create = (): number => socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    const fd = netns ? netns.enter(create) : create();
    configureNetlinkFd(fd, { receiveBufferBytes: 1024 * 1024 });
    return new NfElementWriter(fd, family);
  }

  /** Applies every change to `table`'s sets and maps in one transaction; throws in words, changing nothing. */
  write(table: string, changes: readonly ElementChange[]): Promise<void> {
    const next = this.queue.then(() => this.writeNow(table, changes));
    this.queue = next.catch(() => undefined);
    return next;
  }

  async close(): Promise<void> {
    await this.queue;
    if (this.closed) return;
    this.closed = true;
    closeFd(this.fd);
  }

  private nextSeq(): number {
    this.seq = (this.seq + 1) >>> 0 || 1;
    return this.seq;
  }

  private async writeNow(table: string, changes: readonly ElementChange[]): Promise<void> {
    if (this.closed) throw new NftablesError('nf_tables netlink socket is closed');
    const begin = this.nextSeq();
    const messages: NetlinkMessage[] = [
      {
        type: NFNL_MSG_BATCH_BEGIN,
        flags: NLM_F_REQUEST,
        seq: begin,
        pid: 0,
        payload: nfgenmsg(0, NFNL_SUBSYS_NFTABLES),
      },
    ];
    const acked = new Map<number, string>();
    const header = nfgenmsg(this.family, 0);
    for (const c of changes)
      for (const [op, list] of [
        [NFT_MSG_DELSETELEM, c.delete],
        [NFT_MSG_NEWSETELEM, c.add],
      ] as const)
        for (const part of chunks(list)) {
          const seq = this.nextSeq();
          const create = op === NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0;
          acked.set(seq, `${op === NFT_MSG_NEWSETELEM ? 'adding' : 'deleting'} elements of set ${c.set}`);
          messages.push({
            type: (NFNL_SUBSYS_NFTABLES << 8) | op,
            flags: NLM_F_REQUEST | NLM_F_ACK | create,
            seq,
            pid: 0,
            payload: Buffer.concat([header, elementList(c, table, part, op === NFT_MSG_NEWSETELEM)]),
          });
        }
    if (acked.size === 0) return;
    messages.push({
      type: NFNL_MSG_BATCH_END,
      flags: NLM_F_REQUEST,
      seq: this.nextSeq(),
      pid: 0,
      payload: nfgenmsg(0, NFNL_SUBSYS_NFTABLES),
    });
    await write(this.fd, encodeMessages(messages));
    await this.awaitAcks(begin, acked);
  }

  /**
   * Every element message asked for an ACK, and the kernel sends them all once the batch is committed
   * or aborted; a failed commit is answered on the BATCH_BEGIN's sequence number first.
   */
  private async awaitAcks(begin: number, pending: Map<number, string>): Promise<void> {
    const failures: string[] = [];
    const buf = Buffer.allocUnsafe(RECEIVE_SIZE);
    while (pending.size > 0) {
      const n = await read(this.fd, buf);
      for (const msg of decodeMessages(buf.subarray(0, n))) {
        if (msg.type !== NLMSG_ERROR) continue;
        const ack = decodeErrorMessage(msg);
        const what = msg.seq === begin ? 'committing the batch' : pending.get(msg.seq);
        if (what === undefined) continue;
        pending.delete(msg.seq);
        if (ack.errno !== 0) failures.push(new NetlinkError(ack.errno, 0, ack.extack, what).message);
        if (msg.seq === begin) pending.clear();
      }
    }
    if (failures.length > 0)
      throw new NftablesError(
        `nf_tables refused the set elements (nothing was changed): ${failures.join('; ')}`,
      );
  }
}

function write(fd: number, data: Buffer): Promise<void> {
  return new Promise((resolve, reject) =>
    fs.write(fd, data, 0, data.length, null, (err, n) =>
      err
        ? reject(err)
        : n !== data.length
          ? reject(new Error(`short netlink write: ${n} of ${data.length}`))
          : resolve(),
    ),
  );
}

function read(fd: number, buf: Buffer): Promise<number> {
  return new Promise((resolve, reject) =>
    fs.read(fd, buf, 0, buf.length, null, (err, n) =>
      err ? reject(new NftablesError(`no answer from nf_tables: ${err.message}`)) : resolve(n),
    ),
  );
}
