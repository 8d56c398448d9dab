// Address and prefix math for both families, on bigint so that IPv4 and IPv6 share one code path.
//
// Why no library: Node can tell whether a string is an address (net.isIP) but cannot give its canonical
// form or its numeric value. ipaddr.js is the well-kept candidate, but its default parser also accepts
// legacy IPv4 spellings ("10.1", "0x0a.0.0.1", "012.0.0.1") that the kernel and CNI results must never
// see, it works on arrays of parts rather than numbers (we need offsets into pools anyway), and
// RFC 5952 output is an extra call that is easy to forget. Strict parsing plus canonical output is
// about 150 lines, all covered by the tests in test/lib/cidr.test.ts.

/**
 * Text that is not an address or a CIDR, or a value out of its family's range. Always the caller's
 * input at fault: the daemon answers it INVALID_ARGUMENT (core/errors.ts).
 */
export class CidrError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CidrError';
  }
}

export interface Cidr {
  family: 4 | 6;
  /** The network address (host bits all zero). */
  network: bigint;
  prefixLength: number;
  /** Canonical text, e.g. "10.88.0.0/16" or "fd00::/64". */
  text: string;
}

const MAX_TEXT = 64; // longest legal forms are ~45 characters ("ffff:…:255.255.255.255/128")
const V4_DECIMAL = /^(0|[1-9][0-9]{0,2})$/;
const V6_GROUP = /^[0-9a-fA-F]{1,4}$/;
const PREFIX = /^(0|[1-9][0-9]{0,2})$/;

export const familyBits = (family: 4 | 6): number => (family === 4 ? 32 : 128);

/** A bounded, quoted rendering of user input for error messages (garbage may be long or unprintable). */
function quote(text: string): string {
  const shown = text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}…` : text;
  return JSON.stringify(shown);
}

function parseV4(text: string): bigint | string {
  const parts = text.split('.');
  if (parts.length !== 4) return 'an IPv4 address has four dot-separated numbers';
  let value = 0;
  for (const part of parts) {
    // Leading zeros are rejected: some parsers read "010" as octal 8, others as decimal 10.
    if (!V4_DECIMAL.test(part)) return `"${part}" is not a decimal number 0-255 without leading zeros`;
    const n = Number(part);
    if (n > 255) return `${part} is larger than 255`;
    value = value * 256 + n;
  }
  return BigInt(value);
}

function parseV6(text: string): bigint | string {
  if (text.includes('%')) return 'zone indexes (%eth0) are not allowed here';
  const halves = text.split('::');
  if (halves.length > 2) return '"::" may appear only once';
  const groupsOf = (half: string | undefined): string[] =>
    half === undefined || half === '' ? [] : half.split(':');
  const head = groupsOf(halves[0]);
  const tail = groupsOf(halves[1]);
  const compressed = halves.length === 2;

  // An embedded IPv4 tail ("::ffff:10.0.0.1") stands for the last two groups.
  // It must be the very last thing in the text, so never before a trailing "::".
  const words: number[] = [];
  const lastGroups = compressed ? tail : head;
  const last = lastGroups[lastGroups.length - 1];
  let v4Tail: bigint | undefined;
  if (last !== undefined && last.includes('.')) {
    const v4 = parseV4(last);
    if (typeof v4 === 'string') return `embedded IPv4 part: ${v4}`;
    v4Tail = v4;
    lastGroups.pop();
  }
  for (const group of [...head, ...tail]) {
    if (!V6_GROUP.test(group)) return `"${group}" is not a group of 1-4 hex digits`;
  }
  const wanted = v4Tail === undefined ? 8 : 6;
  const present = head.length + tail.length;
  if (compressed ? present > wanted - 1 : present !== wanted) {
    return compressed ? 'too many groups around "::"' : `expected ${wanted} groups of hex digits`;
  }
  for (const g of head) words.push(parseInt(g, 16));
  for (let i = present; i < wanted; i++) words.push(0);
  for (const g of tail) words.push(parseInt(g, 16));

  let value = 0n;
  for (const w of words) value = (value << 16n) | BigInt(w);
  if (v4Tail !== undefined) value = (value << 32n) | v4Tail;
  return value;
}

/** Parses one IPv4 (strict dotted decimal) or IPv6 address. Throws a CidrError on anything else. */
export function parseAddress(text: string): { family: 4 | 6; value: bigint } {
  if (typeof text !== 'string' || text.length === 0 || text.length > MAX_TEXT) {
    throw new CidrError(`${quote(String(text))} is not an IP address`);
  }
  const family: 4 | 6 = text.includes(':') ? 6 : 4;
  const result = family === 4 ? parseV4(text) : parseV6(text);
  if (typeof result === 'string') {
    throw new CidrError(`${quote(text)} is not a valid IPv${family} address: ${result}`);
  }
  return { family, value: result };
}

function formatV4(value: number): string {
  return `${(value >>> 24) & 255}.${(value >>> 16) & 255}.${(value >>> 8) & 255}.${value & 255}`;
}

const V4_MAPPED_PREFIX = 0xffffn << 32n;

/** Canonical text: dotted decimal for IPv4, RFC 5952 for IPv6 (lowercase, no leading zeros, "::"). */
export function formatAddress(family: 4 | 6, value: bigint): string {
  if (value < 0n || value >> BigInt(familyBits(family)) !== 0n) {
    throw new CidrError(`${value} is not an IPv${family} address value`);
  }
  if (family === 4) return formatV4(Number(value));

  // RFC 5952 §5: IPv4-mapped addresses keep their IPv4 part in dotted form.
  if (value >> 32n === 0xffffn) return `::ffff:${formatV4(Number(value - V4_MAPPED_PREFIX))}`;

  const groups: number[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(Number((value >> shift) & 0xffffn));

  // RFC 5952 §4.2: compress the longest run of two or more zero groups, the first one on a tie.
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]): string => gs.map((g) => g.toString(16)).join(':');
  if (bestStart < 0) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLen))}`;
}

/** The address in network byte order: 4 bytes for IPv4, 16 for IPv6 (what netlink and the proto want). */
export function addressToBytes(text: string): Buffer {
  const { family, value } = parseAddress(text);
  const size = family === 4 ? 4 : 16;
  const out = Buffer.alloc(size);
  let v = value;
  for (let i = size - 1; i >= 0; i--) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return out;
}

/**
 * Parses "address/prefix". The address must be the network address: "10.88.0.1/16" is rejected rather
 * than silently masked, because it usually means the operator meant something else.
 */
export function parseCidr(text: string): Cidr {
  if (typeof text !== 'string' || !text.includes('/')) {
    throw new CidrError(
      `${quote(String(text))} is not a CIDR: expected address/prefix, e.g. 10.88.0.0/16 or fd00::/64`,
    );
  }
  const slash = text.indexOf('/');
  const addrText = text.slice(0, slash);
  const prefixText = text.slice(slash + 1);
  let addr: { family: 4 | 6; value: bigint };
  try {
    addr = parseAddress(addrText);
  } catch (err) {
    throw new CidrError(`${quote(text)} is not a CIDR: ${(err as Error).message}`);
  }
  const bits = familyBits(addr.family);
  if (!PREFIX.test(prefixText)) {
    throw new CidrError(`${quote(text)} is not a CIDR: prefix length must be a number 0-${bits}`);
  }
  const prefixLength = Number(prefixText);
  if (prefixLength > bits) {
    throw new CidrError(
      `${quote(text)}: prefix length ${prefixLength} is out of range for IPv${addr.family} (0-${bits})`,
    );
  }
  const hostBits = BigInt(bits - prefixLength);
  const network = (addr.value >> hostBits) << hostBits;
  const canonical = `${formatAddress(addr.family, network)}/${prefixLength}`;
  if (network !== addr.value) {
    throw new CidrError(`${text} has host bits set; did you mean ${canonical}?`);
  }
  return { family: addr.family, network, prefixLength, text: canonical };
}

/** Whether `value` (an address of the CIDR's own family) lies inside the CIDR. */
export function cidrContains(c: Cidr, value: bigint): boolean {
  const bits = familyBits(c.family);
  if (value < 0n || value >> BigInt(bits) !== 0n) return false;
  const hostBits = BigInt(bits - c.prefixLength);
  return value >> hostBits === c.network >> hostBits;
}

/** Number of addresses the CIDR spans (2^host bits). */
export function cidrSize(c: Cidr): bigint {
  return 1n << BigInt(familyBits(c.family) - c.prefixLength);
}
