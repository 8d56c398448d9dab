// One CIDR's worth of addresses handed out round-robin, the way host-local does it (allocation resumes
// after the last one handed out), so a just-released address is not given to the next workload while
// stale ARP/neighbour entries or conntrack state for it may still exist elsewhere.
//
// What is never handed out:
//   - offset 0, the network address (and, for IPv6, the subnet-router anycast address);
//   - offset 1, kept for the node/gateway side by convention, as host-local and most CNI setups do;
//   - for IPv4, the last address (broadcast);
//   - every address or CIDR listed in `reserved`.
// A `wholeBlock` pool is a block cut from a larger range (an etcd block): its first and last addresses
// are ordinary addresses of that range, and the gateway is link-local, so only `reserved` is withheld.
// Withholding three addresses per /26 block would waste 5% of a cluster range.
// An IPv6 pool larger than 2^20 addresses only hands out its first 2^20 offsets: a node never runs a
// million workloads, and tracking a /64 bit by bit is impossible. IPv4 pools must be /8 or longer (a
// 2 MiB bitmap at most) and leave at least one usable address, so /31 and /32 are rejected.
//
// State is a bitmap of taken offsets (held or never-usable) with a summary of full words, so finding
// the next free address is fast at any size (offset-bitmap.ts).
//
// A pool may be cut into slices (address-slices.ts: one per DPU of the node): each slice then has its
// own round-robin cursor and count of addresses held, and allocateInSlice() searches only its offsets
// with the same summary bitmap. A pool that is not cut pays one absent-field check per change.

import { cidrContains, cidrSize, formatAddress, parseAddress, parseCidr, type Cidr } from '../../lib/cidr';
import { exhausted, internal, invalidArgument } from '../errors';
import { IPV6_TRACKED_BITS, cutRange } from './address-slices';
import { OffsetBitmap } from './offset-bitmap';

/** Largest number of offsets an IPv6 pool tracks (its first 2^20 addresses). */
export const IPV6_POOL_WINDOW = 1 << IPV6_TRACKED_BITS;
/** Shortest IPv4 prefix accepted for a pool. */
export const IPV4_MIN_PREFIX = 8;

/** A pool's slices: slice i is offsets [i << shift, (i + 1) << shift). */
interface Slicing {
  cidrs: string[];
  shift: number;
  usable: Uint32Array;
  held: Uint32Array;
  /** Per slice, the offset last handed out from it, or -1. */
  last: Int32Array;
}

export class IpPool {
  readonly cidr: Cidr;
  readonly family: 4 | 6;
  /** Offsets [0, span) are tracked; everything past it is outside what this pool hands out. */
  private readonly span: number;
  /** Which offsets are taken and which blocked for good. */
  private readonly bits: OffsetBitmap;
  private readonly usable: number;
  private held = 0;
  /** Offset of the last address handed out (host-local's lastReserved), or -1 before the first. */
  private last = -1;
  /** Absent until cut(). */
  private slicing?: Slicing;
  /** The tunnel endpoint (DPU) whose ports this pool addresses; absent: the node's (PoolConfig.endpoint). */
  readonly endpoint?: string;

  constructor(cidr: string, reserved: string[] = [], opts: { wholeBlock?: boolean; endpoint?: string } = {}) {
    this.cidr = parseCidr(cidr);
    if (opts.endpoint !== undefined) this.endpoint = opts.endpoint;
    this.family = this.cidr.family;
    const { text, prefixLength } = this.cidr;

    if (this.family === 4 && prefixLength < IPV4_MIN_PREFIX) {
      throw invalidArgument(
        `IPv4 pool ${text} is too large: use a prefix of /${IPV4_MIN_PREFIX} or longer (a node pool is usually /16-/24)`,
      );
    }
    const total = cidrSize(this.cidr);
    this.span = this.family === 6 && total > BigInt(IPV6_POOL_WINDOW) ? IPV6_POOL_WINDOW : Number(total);

    this.bits = new OffsetBitmap(this.span);

    let blockedCount = 0;
    const blockCounted = (off: number): void => {
      if (off < this.span && !this.bits.isBlocked(off)) blockedCount++;
      this.bits.block(off);
    };
    if (!opts.wholeBlock) {
      blockCounted(0);
      if (this.span > 1) blockCounted(1);
      if (this.family === 4 && this.span > 2) blockCounted(this.span - 1);
    }
    for (const entry of reserved) this.reservedOffsets(entry, blockCounted);

    this.usable = Math.max(0, this.span - blockedCount);
    if (this.usable === 0) {
      if (opts.wholeBlock) throw invalidArgument(`IP block ${text} has no usable address: all are reserved`);
      const why =
        this.family === 4
          ? 'the network address, the node/gateway address (offset 1) and the broadcast address are never handed out'
          : 'the network address and the node/gateway address (offset 1) are never handed out';
      const fix = this.family === 4 ? '/30 or shorter' : '/126 or shorter';
      throw invalidArgument(
        `IP pool ${text} has no usable address: ${why}${reserved.length > 0 ? ', nor reserved ones' : ''}; use ${fix}`,
      );
    }
  }

  /** Number of addresses this pool can hand out. */
  get size(): number {
    return this.usable;
  }

  get used(): number {
    return this.held;
  }

  get free(): number {
    return this.usable - this.held;
  }

  /** The last address handed out; allocation resumes after it. Persist it to keep round-robin across restarts. */
  get cursor(): string | undefined {
    return this.last < 0 ? undefined : this.addressAt(this.last);
  }

  /** Restores the cursor saved from `cursor`. Throws INVALID_ARGUMENT when the address is not in this pool. */
  setCursor(address: string): void {
    this.last = this.trackedOffset(address, 'cannot be the allocation cursor');
  }

  /** Hands out the next free address after the cursor, wrapping around. Throws RESOURCE_EXHAUSTED when full. */
  allocate(): string {
    if (this.held >= this.usable) {
      throw exhausted(
        `IP pool ${this.cidr.text} is exhausted: all ${this.usable} usable addresses are in use; ` +
          'detach workloads or configure a larger or additional pool',
      );
    }
    const start = this.last + 1 < this.span ? this.last + 1 : 0;
    let off = this.bits.findFree(start);
    if (off < 0) off = this.bits.findFree(0);
    if (off < 0) {
      throw internal(
        `IP pool ${this.cidr.text} counts ${this.held}/${this.usable} in use but has no free bit`,
      );
    }
    this.bits.take(off);
    this.held++;
    this.last = off;
    if (this.slicing) this.slicing.held[off >>> this.slicing.shift]!++;
    return this.addressAt(off);
  }

  /**
   * Cuts the pool into `count` slices (address-slices.ts; one slice, the pool, when it is too small to
   * cut). Addresses already held are counted in their slices; cutting again replaces the cut.
   */
  cut(count: number): void {
    const { slices } = cutRange(this.cidr, count);
    const shift = Math.log2(this.span / slices.length);
    const usable = new Uint32Array(slices.length);
    const held = new Uint32Array(slices.length);
    for (let i = 0; i < slices.length; i++) {
      const first = i << shift;
      const end = (i + 1) << shift;
      if (shift >= 5) {
        for (let w = first >>> 5; w < end >>> 5; w++) {
          const blocked = this.bits.blockedInWord(w);
          usable[i]! += 32 - blocked;
          held[i]! += this.bits.takenInWord(w) - blocked;
        }
      } else {
        for (let off = first; off < end; off++) {
          if (this.bits.isBlocked(off)) continue;
          usable[i]!++;
          if (this.bits.isTaken(off)) held[i]!++;
        }
      }
    }
    this.slicing = { cidrs: slices, shift, usable, held, last: new Int32Array(slices.length).fill(-1) };
  }

  /** Number of slices (1 when the pool is not cut or stays whole). */
  get sliceCount(): number {
    return this.slicing?.cidrs.length ?? 1;
  }

  /** Slice i's CIDR, when the pool has one. */
  sliceCidr(i: number): string | undefined {
    return this.slicing ? this.slicing.cidrs[i] : i === 0 ? this.cidr.text : undefined;
  }

  /** The slice an address of the pool lies in, or undefined when the pool does not track it. */
  sliceOf(address: string): number | undefined {
    const off = this.offsetOf(address);
    if (off === undefined) return undefined;
    return this.slicing ? off >>> this.slicing.shift : 0;
  }

  /** Addresses held in slice i (0 for a slice the pool does not have). */
  usedInSlice(i: number): number {
    const st = this.slicing;
    if (!st) return i === 0 ? this.held : 0;
    return i < st.cidrs.length ? st.held[i]! : 0;
  }

  /** Free addresses in slice i (0 for a slice the pool does not have). */
  freeInSlice(i: number): number {
    const st = this.slicing;
    if (!st) return i === 0 ? this.free : 0;
    return i < st.cidrs.length ? st.usable[i]! - st.held[i]! : 0;
  }

  /**
   * Hands out the next free address of slice i after that slice's own cursor, wrapping inside the
   * slice. Throws RESOURCE_EXHAUSTED when the slice is full (check freeInSlice first).
   */
  allocateInSlice(i: number): string {
    const st = this.slicing;
    if (!st) {
      if (i === 0) return this.allocate();
      throw exhausted(`IP pool ${this.cidr.text} has no slice ${i}`);
    }
    if (this.freeInSlice(i) <= 0)
      throw exhausted(`slice ${st.cidrs[i] ?? i} of IP pool ${this.cidr.text} has no free address`);
    const first = i << st.shift;
    const end = (i + 1) << st.shift;
    const last = st.last[i]!;
    let off = last >= first && last + 1 < end ? this.bits.findFree(last + 1, end) : -1;
    if (off < 0) off = this.bits.findFree(first, end);
    if (off < 0) {
      throw internal(
        `slice ${st.cidrs[i]} of IP pool ${this.cidr.text} counts ${st.held[i]}/${st.usable[i]} in use but has no free bit`,
      );
    }
    this.bits.take(off);
    this.held++;
    st.held[i]!++;
    st.last[i] = off;
    return this.addressAt(off);
  }

  /** The last address handed out from slice i, for persisting beside the pool's own cursor. */
  sliceCursor(i: number): string | undefined {
    const last = this.slicing?.last[i];
    return last === undefined || last < 0 ? undefined : this.addressAt(last);
  }

  /** Restores a slice cursor; an address outside the slice is ignored (a cursor is only a hint). */
  setSliceCursor(i: number, address: string): void {
    const st = this.slicing;
    let off: number | undefined;
    try {
      off = this.offsetOf(address);
    } catch {
      return; // not an address at all: a damaged hint, dropped like an out-of-range one
    }
    if (st && off !== undefined && i < st.cidrs.length && off >>> st.shift === i) st.last[i] = off;
  }

  /**
   * Marks an address as held, e.g. when restoring allocations from the store. Idempotent. Throws
   * INVALID_ARGUMENT when the address is outside the pool or is one the pool never hands out.
   */
  markUsed(address: string): void {
    const off = this.trackedOffset(address, 'cannot be marked as used');
    if (this.bits.isBlocked(off)) {
      throw invalidArgument(
        `${address} is reserved in IP pool ${this.cidr.text} (network, node/gateway, broadcast or configured ` +
          'reserved address) and cannot be marked as used',
      );
    }
    if (this.bits.isTaken(off)) return;
    this.bits.take(off);
    this.held++;
    if (this.slicing) this.slicing.held[off >>> this.slicing.shift]!++;
  }

  /** Gives an address back. Idempotent; addresses outside the pool or never handed out are ignored. */
  release(address: string): void {
    const off = this.offsetOf(address);
    if (off === undefined || this.bits.isBlocked(off) || !this.bits.isTaken(off)) return;
    this.bits.untake(off);
    this.held--;
    if (this.slicing) this.slicing.held[off >>> this.slicing.shift]!--;
  }

  /** Whether the address is currently held (reserved addresses are not "used", they are never usable). */
  isUsed(address: string): boolean {
    const off = this.offsetOf(address);
    return off !== undefined && !this.bits.isBlocked(off) && this.bits.isTaken(off);
  }

  /** Whether the address lies inside this pool's CIDR (even past the tracked IPv6 window). */
  contains(address: string): boolean {
    const { family, value } = parseAddress(address);
    return family === this.family && cidrContains(this.cidr, value);
  }

  private addressAt(off: number): string {
    return formatAddress(this.family, this.cidr.network + BigInt(off));
  }

  /** Offset of an address inside the tracked span, or undefined when it is not one this pool tracks. */
  private offsetOf(address: string): number | undefined {
    const { family, value } = parseAddress(address);
    if (family !== this.family) return undefined;
    const off = value - this.cidr.network;
    return off >= 0n && off < BigInt(this.span) ? Number(off) : undefined;
  }

  private trackedOffset(address: string, what: string): number {
    const off = this.offsetOf(address);
    if (off !== undefined) return off;
    if (this.contains(address)) {
      throw invalidArgument(
        `${address} ${what}: pool ${this.cidr.text} only hands out its first ${this.span} addresses`,
      );
    }
    throw invalidArgument(`${address} ${what}: it is not in IP pool ${this.cidr.text}`);
  }

  /** Calls `each` for every tracked offset a `reserved` entry (address or CIDR) covers. */
  private reservedOffsets(entry: string, each: (off: number) => void): void {
    const where = `reserved entry ${JSON.stringify(entry)} of IP pool ${this.cidr.text}`;
    let first: bigint;
    let count: bigint;
    if (entry.includes('/')) {
      const r = parseCidr(entry);
      if (
        r.family !== this.family ||
        r.prefixLength < this.cidr.prefixLength ||
        !cidrContains(this.cidr, r.network)
      ) {
        throw invalidArgument(`${where} is not inside the pool`);
      }
      first = r.network - this.cidr.network;
      count = cidrSize(r);
    } else {
      const a = parseAddress(entry);
      if (a.family !== this.family || !cidrContains(this.cidr, a.value)) {
        throw invalidArgument(`${where} is not inside the pool`);
      }
      first = a.value - this.cidr.network;
      count = 1n;
    }
    const end = first + count < BigInt(this.span) ? Number(first + count) : this.span;
    for (let off = Number(first < BigInt(this.span) ? first : BigInt(this.span)); off < end; off++) each(off);
  }
}
