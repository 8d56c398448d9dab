// Netlink attributes (struct nlattr): a 4-byte header {u16 len, u16 type} followed by the payload,
// padded to a 4-byte boundary. `len` counts header + payload but not the padding, so a decoder must
// align before reading the next attribute. Values are in host byte order unless the
// NLA_F_NET_BYTEORDER bit says otherwise; no rtnetlink attribute we use sets it.

import * as os from 'node:os';

export const NLA_ALIGNTO = 4;
export const NLA_HDRLEN = 4;
/** Set on attributes whose payload is itself a list of attributes. */
export const NLA_F_NESTED = 0x8000;
export const NLA_F_NET_BYTEORDER = 0x4000;
export const NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xffff;

const LITTLE_ENDIAN = os.endianness() === 'LE';

export const nlaAlign = (len: number): number => (len + NLA_ALIGNTO - 1) & ~(NLA_ALIGNTO - 1);

/** An attribute to encode: a leaf with a raw payload, or a nest of further attributes. */
export type Attribute =
  | { readonly type: number; readonly value: Buffer }
  | { readonly type: number; readonly nested: readonly Attribute[] };

// ---- host-order scalar helpers (structs and attribute payloads share them) ----

export function writeU16(buf: Buffer, value: number, offset: number): void {
  if (LITTLE_ENDIAN) buf.writeUInt16LE(value, offset);
  else buf.writeUInt16BE(value, offset);
}

export function writeU32(buf: Buffer, value: number, offset: number): void {
  if (LITTLE_ENDIAN) buf.writeUInt32LE(value >>> 0, offset);
  else buf.writeUInt32BE(value >>> 0, offset);
}

export function writeS32(buf: Buffer, value: number, offset: number): void {
  if (LITTLE_ENDIAN) buf.writeInt32LE(value, offset);
  else buf.writeInt32BE(value, offset);
}

export function readU16(buf: Buffer, offset: number): number {
  return LITTLE_ENDIAN ? buf.readUInt16LE(offset) : buf.readUInt16BE(offset);
}

export function readU32(buf: Buffer, offset: number): number {
  return LITTLE_ENDIAN ? buf.readUInt32LE(offset) : buf.readUInt32BE(offset);
}

export function readS32(buf: Buffer, offset: number): number {
  return LITTLE_ENDIAN ? buf.readInt32LE(offset) : buf.readInt32BE(offset);
}

// ---- leaf constructors ----

export function attrBytes(type: number, value: Buffer): Attribute {
  return { type, value };
}

export function attrU8(type: number, value: number): Attribute {
  return { type, value: Buffer.from([value & 0xff]) };
}

export function attrU16(type: number, value: number): Attribute {
  const b = Buffer.alloc(2);
  writeU16(b, value, 0);
  return { type, value: b };
}

export function attrU32(type: number, value: number): Attribute {
  const b = Buffer.alloc(4);
  writeU32(b, value, 0);
  return { type, value: b };
}

export function attrS32(type: number, value: number): Attribute {
  const b = Buffer.alloc(4);
  writeS32(b, value, 0);
  return { type, value: b };
}

/** A NUL-terminated string, as the kernel's NLA_STRING / NLA_NUL_STRING policies expect. */
export function attrString(type: number, value: string): Attribute {
  return { type, value: Buffer.concat([Buffer.from(value, 'utf8'), Buffer.alloc(1)]) };
}

export function attrNest(type: number, nested: readonly Attribute[]): Attribute {
  return { type, nested };
}

// ---- encoding ----

/** Encoded size of one attribute including trailing padding. */
export function attributeSize(attr: Attribute): number {
  return nlaAlign(NLA_HDRLEN + payloadSize(attr));
}

function payloadSize(attr: Attribute): number {
  if ('value' in attr) return attr.value.length;
  let n = 0;
  for (const child of attr.nested) n += attributeSize(child);
  return n;
}

function encodeInto(attr: Attribute, buf: Buffer, offset: number): number {
  const len = NLA_HDRLEN + payloadSize(attr);
  if (len > 0xffff) throw new RangeError(`netlink attribute ${attr.type} is too large (${len} bytes)`);
  writeU16(buf, len, offset);
  const type = 'nested' in attr ? attr.type | NLA_F_NESTED : attr.type;
  writeU16(buf, type, offset + 2);
  let pos = offset + NLA_HDRLEN;
  if ('value' in attr) {
    attr.value.copy(buf, pos);
    pos += attr.value.length;
  } else {
    for (const child of attr.nested) pos = encodeInto(child, buf, pos);
  }
  const end = offset + nlaAlign(len);
  buf.fill(0, pos, end);
  return end;
}

export function encodeAttributes(attrs: readonly Attribute[]): Buffer {
  let size = 0;
  for (const a of attrs) size += attributeSize(a);
  const buf = Buffer.alloc(size);
  let pos = 0;
  for (const a of attrs) pos = encodeInto(a, buf, pos);
  return buf;
}

// ---- decoding ----

export interface DecodedAttribute {
  /** Type with the NESTED / NET_BYTEORDER flag bits removed. */
  type: number;
  nested: boolean;
  value: Buffer;
}

/**
 * Splits a buffer into attributes. The returned values are views into `buf` (no copies).
 * Throws on a length that runs past the end, since that means the message is corrupt or truncated.
 */
export function decodeAttributes(buf: Buffer): DecodedAttribute[] {
  const out: DecodedAttribute[] = [];
  let pos = 0;
  while (pos + NLA_HDRLEN <= buf.length) {
    const len = readU16(buf, pos);
    const rawType = readU16(buf, pos + 2);
    if (len < NLA_HDRLEN || pos + len > buf.length) {
      throw new RangeError(
        `malformed netlink attribute at offset ${pos}: length ${len}, ${buf.length - pos} left`,
      );
    }
    out.push({
      type: rawType & NLA_TYPE_MASK,
      nested: (rawType & NLA_F_NESTED) !== 0,
      value: buf.subarray(pos + NLA_HDRLEN, pos + len),
    });
    pos += nlaAlign(len);
  }
  return out;
}

/** Attributes by type; when a type repeats, the last one wins (as in the kernel's nla_parse). */
export function attributeMap(buf: Buffer): Map<number, Buffer> {
  const m = new Map<number, Buffer>();
  for (const a of decodeAttributes(buf)) m.set(a.type, a.value);
  return m;
}

export function getU8(value: Buffer): number {
  if (value.length < 1) throw new RangeError('netlink u8 attribute is empty');
  return value.readUInt8(0);
}

export function getU32(value: Buffer): number {
  if (value.length < 4) throw new RangeError(`netlink u32 attribute has ${value.length} bytes`);
  return readU32(value, 0);
}

export function getS32(value: Buffer): number {
  if (value.length < 4) throw new RangeError(`netlink s32 attribute has ${value.length} bytes`);
  return readS32(value, 0);
}

/** A string attribute without its NUL terminator (tolerates a missing one). */
export function getString(value: Buffer): string {
  const nul = value.indexOf(0);
  return value.toString('utf8', 0, nul === -1 ? value.length : nul);
}
