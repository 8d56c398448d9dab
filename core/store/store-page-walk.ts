import * as fs from 'node:fs';

// Walks every B-tree of an LMDB data file with plain reads, the way lmdb would through its memory map,
// and checks each page before anything follows a number taken from it. lmdb itself trusts its pages: a
// garbage page inside a tree sends it to wild page numbers and offsets (SIGSEGV, SIGBUS, assertion
// failures) instead of an error, and the free-page tree is read by the first write, so a read-only
// pass through the API does not find damage there. Layout as in mdb.c (lmdb npm package, format 2):
//
//   page header, 24 bytes: pgno u64, txnid u64, pad u16, flags u16, lower u16, upper u16
//     (lower/upper are offsets past the header; an overflow page keeps its page count in lower/upper)
//   then `lower / 2` u16 node offsets (also past the header)
//   node: lo u16, hi u16, flags u16, ksize u16, key, data
//     branch: child page = lo | hi << 16 | flags << 32
//     leaf: data size = lo | hi << 16; F_BIGDATA: data is the u64 number of an overflow page;
//           F_SUBDATA: data is a 48-byte database record whose root page is its u64 at +40

const HEADER = 24;
const NODE_HEADER = 8;
const P_BRANCH = 0x01;
const P_LEAF = 0x02;
const P_OVERFLOW = 0x04;
const P_LEAF2 = 0x20;
const F_BIGDATA = 0x01;
const F_SUBDATA = 0x02;
const DB_RECORD_BYTES = 48;
const NO_PAGE = 0xffffffffffffffffn;
/** Stop after this many findings: the first few say enough. */
const MAX_PROBLEMS = 5;

export interface TreeRoot {
  name: string;
  root: bigint;
}

/** Problems found in the trees below `roots`, one sentence each; empty when every page checks out. */
export function walkTrees(fd: number, pageSize: number, lastPage: bigint, roots: TreeRoot[]): string[] {
  const problems: string[] = [];
  const seen = new Set<bigint>();
  const page = Buffer.alloc(pageSize);
  const stack: Array<{ pgno: bigint; tree: string; main: boolean }> = roots
    .filter((r) => r.root !== NO_PAGE)
    .map((r) => ({ pgno: r.root, tree: r.name, main: r.name === 'main' }));
  const fail = (pgno: bigint, tree: string, what: string): void => {
    problems.push(`page ${pgno} of the ${tree} tree ${what}`);
  };
  const inRange = (pgno: bigint): boolean => pgno >= 2n && pgno <= lastPage;

  while (stack.length > 0 && problems.length < MAX_PROBLEMS) {
    const { pgno, tree, main } = stack.pop()!;
    if (!inRange(pgno)) {
      fail(pgno, tree, `is referenced but lies outside the file's pages 2..${lastPage}`);
      continue;
    }
    if (seen.has(pgno)) {
      fail(pgno, tree, 'is referenced twice (a loop or a shared page)');
      continue;
    }
    seen.add(pgno);
    const header = readPage(fd, page, pgno, pageSize);
    if (typeof header === 'string') {
      fail(pgno, tree, header);
      continue;
    }
    const { kind, flags, lower } = header;
    // Fixed-size duplicate pages hold bare keys and no node headers; our databases do not use them.
    if (flags & P_LEAF2) continue;
    for (let i = 0; i < lower / 2; i++) {
      const at = HEADER + page.readUInt16LE(HEADER + 2 * i);
      if (at < HEADER + lower || at + NODE_HEADER > pageSize) {
        fail(pgno, tree, `has node ${i} at offset ${at}, outside the page's node area`);
        break;
      }
      const lo = page.readUInt16LE(at);
      const hi = page.readUInt16LE(at + 2);
      const nodeFlags = page.readUInt16LE(at + 4);
      const keySize = page.readUInt16LE(at + 6);
      const dataAt = at + NODE_HEADER + keySize;
      if (dataAt > pageSize) {
        fail(pgno, tree, `has node ${i} whose key runs past the end of the page`);
        break;
      }
      if (kind === P_BRANCH) {
        stack.push({ pgno: BigInt(lo) | (BigInt(hi) << 16n) | (BigInt(nodeFlags) << 32n), tree, main });
        continue;
      }
      const dataSize = lo | (hi << 16);
      if (nodeFlags & F_BIGDATA) {
        if (dataAt + 8 > pageSize) {
          fail(pgno, tree, `has node ${i} whose overflow page number runs past the end of the page`);
          break;
        }
        const problem = overflowProblem(fd, page.readBigUInt64LE(dataAt), dataSize, pageSize, lastPage, seen);
        if (problem) fail(pgno, tree, `has node ${i} whose value ${problem}`);
        continue;
      }
      if (dataAt + dataSize > pageSize) {
        fail(pgno, tree, `has node ${i} whose value runs past the end of the page`);
        break;
      }
      if (main && nodeFlags & F_SUBDATA) {
        if (dataSize !== DB_RECORD_BYTES) {
          fail(pgno, tree, `has a database record of ${dataSize} bytes`);
          continue;
        }
        const name = page.toString('utf8', at + NODE_HEADER, dataAt).replace(/\0+$/, '');
        const root = page.readBigUInt64LE(dataAt + 40);
        if (root !== NO_PAGE) stack.push({ pgno: root, tree: `"${name}"`, main: false });
      }
    }
  }
  return problems;
}

/**
 * Reads page `pgno` into `page` and checks its header: its flags and the bounds of its nodes, or what
 * is wrong with it, in words that follow "page N of the T tree".
 */
function readPage(
  fd: number,
  page: Buffer,
  pgno: bigint,
  pageSize: number,
): { kind: number; flags: number; lower: number } | string {
  if (fs.readSync(fd, page, 0, pageSize, Number(pgno) * pageSize) !== pageSize)
    return 'cannot be read in full';
  const own = page.readBigUInt64LE(0);
  const flags = page.readUInt16LE(18);
  const lower = page.readUInt16LE(20);
  const upper = page.readUInt16LE(22);
  if (own !== pgno) return `carries page number ${own}: it is not the page the tree expects`;
  const kind = flags & (P_BRANCH | P_LEAF | P_OVERFLOW);
  if (kind !== P_BRANCH && kind !== P_LEAF)
    return `has flags 0x${flags.toString(16)}, neither a branch nor a leaf page`;
  if (lower % 2 !== 0 || lower > upper || HEADER + upper > pageSize)
    return `has impossible free-space bounds ${lower}..${upper}`;
  return { kind, flags, lower };
}

/** Checks the first page of an overflow value (lmdb reads the value's pages as one run). */
function overflowProblem(
  fd: number,
  pgno: bigint,
  dataSize: number,
  pageSize: number,
  lastPage: bigint,
  seen: Set<bigint>,
): string | undefined {
  if (pgno < 2n || pgno > lastPage) return `names overflow page ${pgno}, outside the file's pages`;
  if (seen.has(pgno)) return `names overflow page ${pgno}, which another reference already uses`;
  seen.add(pgno);
  const head = Buffer.alloc(HEADER);
  if (fs.readSync(fd, head, 0, HEADER, Number(pgno) * pageSize) !== HEADER)
    return `names overflow page ${pgno}, which cannot be read`;
  if (head.readBigUInt64LE(0) !== pgno || !(head.readUInt16LE(18) & P_OVERFLOW))
    return `names page ${pgno}, which is not an overflow page`;
  const pages = BigInt(head.readUInt32LE(20));
  if (pages < 1n || pgno + pages - 1n > lastPage || BigInt(dataSize) > pages * BigInt(pageSize))
    return `names overflow page ${pgno} with an impossible run of ${pages} pages for ${dataSize} bytes`;
  return undefined;
}
