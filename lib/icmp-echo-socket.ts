// A raw ICMP (ICMPv6) socket that sends echo requests and reads echo replies, bound to the network
// namespace it was created in (Node has no raw sockets; the socket comes from libc, like netlink's).
//
// Why it looks like this:
// - Raw, not the unprivileged "ping" datagram socket: that one needs net.ipv4.ping_group_range to
//   admit the daemon's group, a setting of the node that is not ours to change. The daemon runs as root.
// - A send is one sendto(2) with MSG_DONTWAIT on the calling thread: an echo request is handed to the
//   kernel's transmit path and never waits (a full buffer is reported, not waited for).
// - Reads go through fs.read on the threadpool, and only while some request is unanswered (the
//   caller's loop), as netlink's socket does; SO_RCVTIMEO bounds each read, so a lost reply parks a
//   thread for at most that long and close() waits at most that long.
// - The kernel delivers every echo reply of the namespace to every raw ICMP socket: ICMP_FILTER
//   (ICMP6_FILTER) keeps only echo replies, and each request carries this socket's random token, so
//   another ping in the namespace is never taken for one of ours.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { SOCK_CLOEXEC, SOCK_RAW, SOL_SOCKET, SO_RCVTIMEO, closeFd, sendTo, setsockopt, socket } from './libc';
import { addressToBytes, parseAddress } from './cidr';
import type { Netns } from './netns/netns-handle';

const AF_INET = 2;
const AF_INET6 = 10;
const IPPROTO_ICMP = 1;
const IPPROTO_ICMPV6 = 58;
const SOL_RAW = 255;
const ICMP_FILTER = 1;
const SOL_ICMPV6 = 58;
const ICMP6_FILTER = 1;
const MSG_DONTWAIT = 0x40;

const ICMP_ECHO_REPLY = 0;
const ICMP_ECHO = 8;
const ICMP6_ECHO_REQUEST = 128;
const ICMP6_ECHO_REPLY = 129;

/** ICMP header (8) + token (8). */
const MESSAGE_BYTES = 16;
const RECEIVE_BYTES = 2048;

export interface EchoReply {
  /** The echo sequence number the request carried. */
  seq: number;
  /** Who answered (IPv4: from the reply's IP header; IPv6 raw sockets give no header: undefined). */
  from?: string;
}

export class IcmpEchoSocket {
  private closed = false;
  private reading: Promise<unknown> = Promise.resolve();
  private readonly buf = Buffer.allocUnsafe(RECEIVE_BYTES);

  private constructor(
    private readonly fd: number,
    readonly family: 4 | 6,
    /** Echo identifier of this socket's requests. */
    private readonly id: number,
    /** Carried in every request and checked in every reply. */
    private readonly token: Buffer,
  ) {}

  /** A socket in `ns` (root needed); `receiveTimeoutMs` bounds every read. */
  static openIn(ns: Netns, family: 4 | 6, receiveTimeoutMs = 500): IcmpEchoSocket {
    const fd = ns.enter(() =>
      socket(
        family === 4 ? AF_INET : AF_INET6,
        SOCK_RAW | SOCK_CLOEXEC,
        family === 4 ? IPPROTO_ICMP : IPPROTO_ICMPV6,
      ),
    );
    try {
      if (family === 4) {
        // A set bit drops that type: everything but echo replies.
        setsockopt(
          fd,
          SOL_RAW,
          ICMP_FILTER,
          Buffer.from(new Uint32Array([~(1 << ICMP_ECHO_REPLY) >>> 0]).buffer),
        );
      } else {
        const words = new Uint32Array(8).fill(0xffffffff);
        words[ICMP6_ECHO_REPLY >> 5] = (words[ICMP6_ECHO_REPLY >> 5] ?? 0) & ~(1 << (ICMP6_ECHO_REPLY & 31));
        setsockopt(fd, SOL_ICMPV6, ICMP6_FILTER, Buffer.from(words.buffer));
      }
      // struct timeval { long tv_sec; long tv_usec; } on 64-bit Linux.
      const tv = Buffer.alloc(16);
      tv.writeBigInt64LE(BigInt(Math.floor(receiveTimeoutMs / 1000)), 0);
      tv.writeBigInt64LE(BigInt((receiveTimeoutMs % 1000) * 1000), 8);
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, tv);
    } catch (err) {
      closeFd(fd);
      throw err;
    }
    return new IcmpEchoSocket(fd, family, crypto.randomInt(1, 0xffff), crypto.randomBytes(8));
  }

  /**
   * Sends one echo request to `to`; returns undefined when the kernel took it, else why not (an errno
   * name: ENETUNREACH, EAGAIN when the send buffer is full, …). Never waits.
   */
  send(to: string, seq: number): string | undefined {
    if (this.closed) return 'EBADF';
    const msg = Buffer.alloc(MESSAGE_BYTES);
    msg.writeUInt8(this.family === 4 ? ICMP_ECHO : ICMP6_ECHO_REQUEST, 0);
    msg.writeUInt16BE(this.id, 4);
    msg.writeUInt16BE(seq & 0xffff, 6);
    this.token.copy(msg, 8);
    // ICMPv6 checksums cover a pseudo-header: the kernel fills them in for raw ICMPv6 sockets.
    if (this.family === 4) msg.writeUInt16BE(checksum(msg), 2);
    try {
      sendTo(this.fd, msg, MSG_DONTWAIT, sockaddr(this.family, to));
      return undefined;
    } catch (err) {
      return (err as { code?: string }).code ?? (err as Error).message;
    }
  }

  /**
   * Reads until one of our echo replies arrives or the read times out (undefined). One read at a time:
   * the caller loops while it has requests unanswered.
   */
  receive(): Promise<EchoReply | undefined> {
    const next = this.reading.then(() => this.readOne());
    this.reading = next.catch(() => undefined);
    return next;
  }

  /** Closes the socket once a read in progress has ended (at most the receive timeout). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.reading;
    closeFd(this.fd);
  }

  private async readOne(): Promise<EchoReply | undefined> {
    for (;;) {
      if (this.closed) return undefined;
      let n: number;
      try {
        n = await new Promise<number>((resolve, reject) =>
          fs.read(this.fd, this.buf, 0, this.buf.length, null, (err, bytes) =>
            err ? reject(err) : resolve(bytes),
          ),
        );
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EAGAIN' || code === 'EWOULDBLOCK') return undefined;
        throw err;
      }
      const reply = this.parse(this.buf.subarray(0, n));
      if (reply) return reply;
    }
  }

  /** Our echo reply in a datagram (IPv4 raw sockets deliver the IP header too), or undefined. */
  private parse(d: Buffer): EchoReply | undefined {
    let icmp = d;
    let from: string | undefined;
    if (this.family === 4) {
      if (d.length < 20) return undefined;
      const headerBytes = (d.readUInt8(0) & 0x0f) * 4;
      from = `${d[12]}.${d[13]}.${d[14]}.${d[15]}`;
      icmp = d.subarray(headerBytes);
    }
    if (icmp.length < MESSAGE_BYTES) return undefined;
    if (icmp.readUInt8(0) !== (this.family === 4 ? ICMP_ECHO_REPLY : ICMP6_ECHO_REPLY)) return undefined;
    if (icmp.readUInt16BE(4) !== this.id || !icmp.subarray(8, 16).equals(this.token)) return undefined;
    return { seq: icmp.readUInt16BE(6), ...(from === undefined ? {} : { from }) };
  }
}

/** struct sockaddr_in / sockaddr_in6 for `to` (port 0: raw sockets take none). */
function sockaddr(family: 4 | 6, to: string): Buffer {
  if (parseAddress(to).family !== family) throw new TypeError(`${to} is not an IPv${family} address`);
  const bytes = addressToBytes(to);
  const b = Buffer.alloc(family === 4 ? 16 : 28);
  b.writeUInt16LE(family === 4 ? AF_INET : AF_INET6, 0);
  bytes.copy(b, family === 4 ? 4 : 8);
  return b;
}

/** The Internet checksum (RFC 1071) of an even-length message. */
function checksum(b: Buffer): number {
  let sum = 0;
  for (let i = 0; i < b.length; i += 2) sum += b.readUInt16BE(i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}
