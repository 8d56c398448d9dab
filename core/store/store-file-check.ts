import * as fs from 'node:fs';
import { walkTrees } from './store-page-walk';

// Checks an LMDB data file before it is memory-mapped. LMDB trusts its file: a page it reads past the
// end of a truncated file faults the process (SIGBUS), and meta pages that are zeroed or garbage can
// crash it (SIGSEGV) before any error code exists. Under Restart=always that is a silent crash loop,
// so the daemon reads the two meta pages itself with plain reads first and refuses the file in words.
//
// The layout read here is LMDB's own (mdb.c in the lmdb npm package, data format version 2 on 64-bit
// builds): pages 0 and 1 each start with a 24-byte page header (page number, txnid, pad, flags, bounds)
// followed by MDB_meta:
//   +0  magic u32 (0xBEEFC0DE)   +4  version u32 (low 16 bits: data format)
//   +8  fixed-map address u64    +16 map size u64
//   +24 free DB record (48 bytes; its first u32 is the page size, its last u64 the root page)
//   +72 main DB record (48 bytes; root page at +40)
//   +120 last used page u64      +128 txnid u64
// The newest valid meta page (highest txnid) describes the live snapshot: every page up to its last
// page must exist in the file, and every page its trees reach must be what the tree expects
// (store-page-walk.ts).

const PAGE_HEADER_BYTES = 24;
const P_META = 0x08;
export const LMDB_MAGIC = 0xbeefc0de;
/** The data format this build's lmdb writes (MDB_DATA_VERSION). */
export const LMDB_DATA_VERSION = 2;
const MIN_PAGE_SIZE = 512;
const MAX_PAGE_SIZE = 65536;

/** One meta page as read from the file. */
export interface MetaPage {
  index: 0 | 1;
  magic: number;
  version: number;
  pageSize: number;
  mapSize: bigint;
  lastPage: bigint;
  txnId: bigint;
  freeRoot: bigint;
  mainRoot: bigint;
}

export interface StoreFileReport {
  file: string;
  /** False when the file does not exist or is empty: lmdb will create a new store. */
  exists: boolean;
  sizeBytes: number;
  /** The meta page lmdb will use, when at least one is valid. */
  meta?: MetaPage;
  /** What is wrong, one sentence each; empty when the file is safe to map. */
  problems: string[];
}

/** Reads and checks the data file without mapping it. Never throws for a corrupt file, only reports. */
export function checkStoreFile(file: string): StoreFileReport {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { file, exists: false, sizeBytes: 0, problems: [] };
    return { file, exists: true, sizeBytes: 0, problems: [`cannot be read: ${(err as Error).message}`] };
  }
  try {
    for (let attempt = 1; ; attempt++) {
      const before = newestTxn(fd);
      const size = fs.fstatSync(fd).size;
      if (size === 0) return { file, exists: false, sizeBytes: 0, problems: [] };
      const result = { file, exists: true, sizeBytes: size, ...checkOpenFile(fd, size) };
      if (result.problems.length === 0) return result;
      // The check reads without holding a reader slot, so a daemon writing meanwhile could reuse pages
      // under it. Pages of the snapshot being walked are reused only from the second commit after it
      // on: with at most one commit in between, what was found is really there.
      const after = newestTxn(fd);
      const stable = before === undefined ? after === undefined : after !== undefined && after <= before + 1n;
      if (stable) return result;
      if (attempt === CHECK_ATTEMPTS) {
        result.problems.push(
          `changed under the check ${CHECK_ATTEMPTS} times (is a daemon writing to it?); these findings may be stale, check again`,
        );
        return result;
      }
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** Times a check is repeated while a writer keeps changing the file under it. */
const CHECK_ATTEMPTS = 5;

/** The newest transaction the meta pages record, or undefined when they cannot be read as meta pages. */
function newestTxn(fd: number): bigint | undefined {
  const first = readMeta(fd, 0, 0);
  if (!(first.flags & P_META) || first.magic !== LMDB_MAGIC || first.pageSize < MIN_PAGE_SIZE)
    return undefined;
  const second = readMeta(fd, 1, first.pageSize);
  if (!(second.flags & P_META) || second.magic !== LMDB_MAGIC) return undefined;
  return first.txnId > second.txnId ? first.txnId : second.txnId;
}

function checkOpenFile(fd: number, size: number): { meta?: MetaPage; problems: string[] } {
  const problems: string[] = [];
  const first = readMeta(fd, 0, 0);
  const firstProblem = metaProblem(first, size);
  // The second meta page sits one page further; its offset is known only from a readable first page.
  const pageSize = firstProblem === undefined ? first.pageSize : 4096;
  const second = readMeta(fd, 1, pageSize);
  const secondProblem = metaProblem(second, size);
  if (firstProblem) problems.push(`meta page 0 ${firstProblem}`);
  if (secondProblem) problems.push(`meta page 1 ${secondProblem}`);
  // lmdb refuses the file (or worse) unless both meta pages are valid.
  if (problems.length > 0) return { problems };
  if (first.pageSize !== second.pageSize)
    problems.push(`the meta pages disagree on the page size (${first.pageSize} and ${second.pageSize})`);
  const meta = first.txnId >= second.txnId ? first : second;
  const needed = (meta.lastPage + 1n) * BigInt(meta.pageSize);
  if (BigInt(size) < needed) {
    problems.push(
      `is truncated: it holds ${size} bytes, but its newest snapshot (transaction ${meta.txnId}) uses pages up to ` +
        `${meta.lastPage}, i.e. ${needed} bytes`,
    );
  }
  if (problems.length > 0) return { meta, problems };
  problems.push(
    ...walkTrees(fd, meta.pageSize, meta.lastPage, [
      { name: 'free-page', root: meta.freeRoot },
      { name: 'main', root: meta.mainRoot },
    ]),
  );
  return { meta, problems };
}

function readMeta(fd: number, index: 0 | 1, offset: number): MetaPage & { flags: number; bytes: number } {
  const buf = Buffer.alloc(PAGE_HEADER_BYTES + 136);
  const bytes = fs.readSync(fd, buf, 0, buf.length, offset);
  const m = PAGE_HEADER_BYTES;
  return {
    index,
    bytes,
    flags: buf.readUInt16LE(18),
    magic: buf.readUInt32LE(m),
    version: buf.readUInt32LE(m + 4) & 0xffff,
    mapSize: buf.readBigUInt64LE(m + 16),
    pageSize: buf.readUInt32LE(m + 24),
    freeRoot: buf.readBigUInt64LE(m + 24 + 40),
    mainRoot: buf.readBigUInt64LE(m + 72 + 40),
    lastPage: buf.readBigUInt64LE(m + 120),
    txnId: buf.readBigUInt64LE(m + 128),
  };
}

function metaProblem(p: MetaPage & { flags: number; bytes: number }, size: number): string | undefined {
  if (p.bytes < PAGE_HEADER_BYTES + 136)
    return `is missing: the file ends after ${size} bytes, before its two meta pages`;
  const allZero = p.flags === 0 && p.magic === 0 && p.pageSize === 0 && p.txnId === 0n;
  if (allZero) return 'is zeroed';
  if (!(p.flags & P_META) || p.magic !== LMDB_MAGIC)
    return `is not an LMDB meta page (flags 0x${p.flags.toString(16)}, magic 0x${p.magic.toString(16)})`;
  if (p.version !== LMDB_DATA_VERSION)
    return `has data format ${p.version}, this build reads format ${LMDB_DATA_VERSION}`;
  if (p.pageSize < MIN_PAGE_SIZE || p.pageSize > MAX_PAGE_SIZE || (p.pageSize & (p.pageSize - 1)) !== 0)
    return `names an impossible page size ${p.pageSize}`;
  if (p.lastPage < 1n) return `names an impossible last page ${p.lastPage}`;
  if ((p.lastPage + 1n) * BigInt(p.pageSize) > p.mapSize)
    return `describes ${p.lastPage + 1n} pages of ${p.pageSize} bytes, more than its map size ${p.mapSize}`;
  return undefined;
}
