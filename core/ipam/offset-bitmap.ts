// The bit-level state of a pool: which offsets are taken (held, or blocked for good) and which are
// blocked, plus a summary bitmap with one bit per full 32-bit word, so finding the next free offset
// skips 1024 offsets per summary-word check: the worst case for 2^20 offsets is ~1024 summary checks,
// never a walk over every address. Its own file because it knows nothing of addresses, cursors or
// slices (ip-pool.ts): it is the search structure those are built on.

const FULL = 0xffffffff;

/** Index of the lowest set bit of a non-zero 32-bit value. */
const lowestBit = (x: number): number => 31 - Math.clz32(x & -x);

/** Set bits of a 32-bit value. */
function popcount(x: number): number {
  let v = x - ((x >>> 1) & 0x55555555);
  v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
  return (((v + (v >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

export class OffsetBitmap {
  /** Bit set: the offset cannot be handed out now (held, or blocked for good). */
  private readonly taken: Uint32Array;
  /** Bit set: the offset is never handed out (network, .1, broadcast, reserved, padding). */
  private readonly blocked: Uint32Array;
  /** Bit w set: taken[w] is full. Bits for words past the end are set so searches never stop there. */
  private readonly fullWords: Uint32Array;

  /** Offsets [0, span) are tracked; the padding up to the next word is blocked. */
  constructor(private readonly span: number) {
    const words = Math.ceil(span / 32);
    this.taken = new Uint32Array(words);
    this.blocked = new Uint32Array(words);
    this.fullWords = new Uint32Array(Math.ceil(words / 32));
    for (let w = words; w < this.fullWords.length * 32; w++) this.fullWords[w >>> 5]! |= 1 << (w & 31);
    for (let off = span; off < words * 32; off++) this.block(off);
  }

  isTaken(off: number): boolean {
    return bit(this.taken, off);
  }

  isBlocked(off: number): boolean {
    return bit(this.blocked, off);
  }

  /** Blocked offsets in word w (offsets [w * 32, w * 32 + 32)). */
  blockedInWord(w: number): number {
    return popcount(this.blocked[w]!);
  }

  /** Taken offsets in word w, blocked ones included. */
  takenInWord(w: number): number {
    return popcount(this.taken[w]!);
  }

  /** Blocks the offset for good (it is taken too). */
  block(off: number): void {
    this.blocked[off >>> 5]! |= 1 << (off & 31);
    this.take(off);
  }

  take(off: number): void {
    const w = off >>> 5;
    const word = (this.taken[w]! | (1 << (off & 31))) >>> 0;
    this.taken[w] = word;
    if (word === FULL) this.fullWords[w >>> 5]! |= 1 << (w & 31);
  }

  untake(off: number): void {
    const w = off >>> 5;
    this.taken[w]! &= ~(1 << (off & 31));
    this.fullWords[w >>> 5]! &= ~(1 << (w & 31));
  }

  /**
   * First offset in [from, end) that is not taken, or -1. Skips full words through the summary
   * bitmap; `end` (a slice's) only bounds the answer, not the search's cost.
   */
  findFree(from: number, end = this.span): number {
    const words = this.taken.length;
    let w = from >>> 5;
    if (w >= words) return -1;
    const firstWord = ~this.taken[w]! & (FULL << (from & 31));
    if (firstWord !== 0) return within((w << 5) + lowestBit(firstWord), end);
    w++;
    const lastWord = Math.min(words, (end + 31) >>> 5);
    while (w < lastWord) {
      const s = w >>> 5;
      const notFull = ~this.fullWords[s]! & (FULL << (w & 31));
      if (notFull !== 0) {
        const word = (s << 5) + lowestBit(notFull);
        return within((word << 5) + lowestBit(~this.taken[word]!), end);
      }
      w = (s + 1) << 5;
    }
    return -1;
  }
}

function bit(map: Uint32Array, off: number): boolean {
  return ((map[off >>> 5]! >>> (off & 31)) & 1) === 1;
}

/** The offset when it lies before `end`, else -1. */
function within(off: number, end: number): number {
  return off < end ? off : -1;
}
