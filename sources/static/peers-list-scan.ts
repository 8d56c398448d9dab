// The entries of a peers file's list, each as a byte range of the file, found without parsing it.
//
// At 5,000 peers the file is about a megabyte and one entry changes at a time: parsing it whole for
// every change would make objects (and a megabyte of text) only to throw them away, since every entry
// but one was read before (peers-file.ts keeps what each entry's text was read as). This scan only
// finds where each entry begins and ends — strings and nesting followed, nothing built — so that only
// an entry whose text is new is parsed. It reads bytes: every character the JSON structure is made of
// is ASCII, and no byte of a multi-byte UTF-8 character is.
//
// It knows one shape, the file's own: {"peers":[{…},{…}]} with any white space. Anything else (another
// key, a value that is not an object, text that is not JSON) gives undefined, and the caller parses the
// file whole, which names what is wrong. An entry's text is never trusted for being found here: it is
// either one that parsed before, byte for byte, or it is parsed now.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_LIST = 0x5b;
const CLOSE_LIST = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;
const PEERS_KEY = Buffer.from('"peers"');

/**
 * Start and end (exclusive) of each entry of the list, in order, one after the other in one array (no
 * pair per entry); undefined when not of the file's shape.
 */
export function scanPeersList(bytes: Uint8Array): number[] | undefined {
  const n = bytes.length;
  let i = skip(bytes, 0);
  if (bytes[i] !== OPEN_OBJECT) return undefined;
  i = skip(bytes, i + 1);
  for (let k = 0; k < PEERS_KEY.length; k++) if (bytes[i + k] !== PEERS_KEY[k]) return undefined;
  i = skip(bytes, i + PEERS_KEY.length);
  if (bytes[i] !== COLON) return undefined;
  i = skip(bytes, i + 1);
  if (bytes[i] !== OPEN_LIST) return undefined;
  i = skip(bytes, i + 1);
  const entries: number[] = [];
  if (bytes[i] === CLOSE_LIST) i++;
  else
    for (;;) {
      if (bytes[i] !== OPEN_OBJECT) return undefined;
      const end = objectEnd(bytes, i);
      if (end === undefined) return undefined;
      entries.push(i, end);
      i = skip(bytes, end);
      const c = bytes[i++];
      if (c === CLOSE_LIST) break;
      if (c !== COMMA) return undefined;
      i = skip(bytes, i);
    }
  i = skip(bytes, i);
  if (bytes[i] !== CLOSE_OBJECT) return undefined;
  return skip(bytes, i + 1) === n ? entries : undefined;
}

/** The first index at or after `i` that is not JSON white space. */
function skip(bytes: Uint8Array, i: number): number {
  const n = bytes.length;
  for (; i < n; i++) {
    const c = bytes[i];
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
  }
  return i;
}

/** Index just past the object that opens at `start`, following strings and nesting; undefined if it never closes. */
function objectEnd(bytes: Uint8Array, start: number): number | undefined {
  let depth = 0;
  const n = bytes.length;
  for (let i = start; i < n; i++) {
    const c = bytes[i];
    if (c === QUOTE) {
      for (i++; i < n; i++) {
        const s = bytes[i];
        if (s === BACKSLASH) i++;
        else if (s === QUOTE) break;
      }
      if (i >= n) return undefined;
    } else if (c === OPEN_OBJECT || c === OPEN_LIST) depth++;
    else if (c === CLOSE_OBJECT || c === CLOSE_LIST) {
      depth--;
      if (depth === 0) return c === CLOSE_OBJECT ? i + 1 : undefined;
    }
  }
  return undefined;
}
