import { expect } from 'chai';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as ts from 'typescript';

// The rooms of docs/architecture.md, checked against the imports in the code: a new file cannot
// quietly import upward, close a circle, or grow a room past what a reader can take in.

const ROOT = path.resolve(__dirname, '..', '..', '..');
const ROOMS = ['lib', 'core', 'backends', 'adapters', 'sources', 'cli'];
// Caps well below where a concept ends, so that concepts decide where a file or function is cut, and a
// file a reader can take in at one sitting; tests hold set-up and cases side by side, so theirs is
// higher. Functions are counted from their first line to their last, nested ones inside their parent.
const LONGEST_SOURCE_FILE = 400;
const LONGEST_TEST_FILE = 600;
const LONGEST_FUNCTION = 80;
// The core's root holds the seams: the contracts between its rooms and the outer ones (Backend,
// WorkloadService, PeerSource, FabricDataplane, their settings and status types, the daemon's part
// and readiness contracts) and what every room shares (errors, logger, metrics, config). A root file is
// one every room may import, so a new one is a decision about the seams, not a place to park code: the
// cap is what the seams need today.
const MOST_FILES_AT_CORE_ROOT = 19;
const ARCHITECTURE = path.join(ROOT, 'docs', 'architecture.md');

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = path.posix.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(rel);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [rel] : [];
  });
}

/** Each file's project imports, as repository paths without extension (type-only ones included). */
function importGraph(files: readonly string[]): Map<string, string[]> {
  const known = new Set(files.map((f) => f.replace(/\.ts$/, '')));
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    const targets = ts
      .preProcessFile(text, true, true)
      .importedFiles.map((i) => i.fileName)
      .filter((spec) => spec.startsWith('.'))
      .map((spec) => {
        const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), spec));
        return known.has(target) ? target : path.posix.join(target, 'index');
      })
      .filter((t) => known.has(t) || t.startsWith('proto/'));
    graph.set(file.replace(/\.ts$/, ''), targets);
  }
  return graph;
}

/** A row of the rooms table: a folder and the folders its files may import (besides its own). */
interface RoomRow {
  folder: string;
  mayImport: string[] | 'every room';
}

/**
 * The rooms table of docs/architecture.md ("## The rooms"): column 1 the folder, column 3 "may import",
 * whose code spans name the folders allowed (`core/` is the core's root); "every room" allows all.
 */
function roomsTable(markdown: string): RoomRow[] {
  const section = markdown.split(/^## /m).find((s) => s.startsWith('The rooms'));
  if (!section) throw new Error('docs/architecture.md has no "## The rooms" section');
  const spans = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
  return section
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) => {
      const cells = line.split('|').map((c) => c.trim());
      const folder = spans(cells[1] ?? '')[0] ?? '';
      const column = cells[3] ?? '';
      return { folder, mayImport: /every room/.test(column) ? 'every room' : spans(column) };
    });
}

/**
 * The table's row of a file: the longest folder that holds it, where a folder that holds other rows'
 * folders (the core's root) holds only the files directly in it.
 */
function roomOf(rows: readonly RoomRow[], file: string): string | undefined {
  const folders = rows.map((r) => r.folder);
  const holding = folders.filter((f) => file.startsWith(f)).sort((a, b) => b.length - a.length)[0];
  if (holding === undefined) return undefined;
  const hasSubRooms = folders.some((f) => f !== holding && f.startsWith(holding));
  return hasSubRooms && path.posix.dirname(file) + '/' !== holding ? undefined : holding;
}

/** The imports the table does not allow, each as "file -> import (room may import: ...)". */
function forbiddenImports(rows: readonly RoomRow[], graph: Map<string, string[]>): string[] {
  const byFolder = new Map(rows.map((r) => [r.folder, r]));
  const found: string[] = [];
  for (const [file, targets] of graph) {
    const room = roomOf(rows, file);
    if (room === undefined) {
      found.push(`${file}: in no room of the table`);
      continue;
    }
    const allowed = byFolder.get(room)?.mayImport ?? [];
    for (const target of targets) {
      const to = roomOf(rows, target);
      if (to === room || allowed === 'every room' || (to !== undefined && allowed.includes(to))) continue;
      found.push(`${file} -> ${target} (${room} may import: ${allowed.join(', ') || 'nothing'})`);
    }
  }
  return found;
}

/** Functions, methods and arrow functions of `file` longer than `most` lines, as "file:line name (n)". */
function longFunctions(file: string, most: number): string[] {
  const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      const name = node.name && ts.isIdentifier(node.name) ? node.name.text : '(anonymous)';
      if (last - first + 1 > most) found.push(`${file}:${first + 1} ${name} (${last - first + 1})`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

function cycles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (node: string): void => {
    state.set(node, 'open');
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'open') found.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of graph.keys()) if (!state.has(node)) visit(node);
  return found;
}

describe('layout of the rooms (docs/architecture.md)', () => {
  const files = ROOMS.flatMap((r) => sourceFiles(r));
  const graph = importGraph(files);
  const importsOf = (prefix: string): Array<[string, string]> =>
    [...graph]
      .filter(([f]) => f.startsWith(prefix))
      .flatMap(([f, ts]) => ts.map((t) => [f, t] as [string, string]));

  it('imports only what the rooms table of docs/architecture.md allows', () => {
    const rows = roomsTable(fs.readFileSync(ARCHITECTURE, 'utf8'));
    const folders = new Set(rows.map((r) => r.folder));
    const unknown = rows.flatMap((r) =>
      r.mayImport === 'every room'
        ? []
        : r.mayImport.filter((f) => !folders.has(f)).map((f) => `${r.folder}: ${f}`),
    );
    expect(unknown, 'folders named in "may import" that have no row').to.deep.equal([]);
    expect(forbiddenImports(rows, graph)).to.deep.equal([]);
  });

  it('the rooms table lets no arrow run back up (its rooms form no circle)', () => {
    const rows = roomsTable(fs.readFileSync(ARCHITECTURE, 'utf8'));
    const allowed = new Map(
      rows.map((r) => [
        r.folder,
        r.mayImport === 'every room' ? [] : r.mayImport.filter((f) => f !== r.folder),
      ]),
    );
    expect(cycles(allowed).map((c) => c.join(' -> '))).to.deep.equal([]);
  });

  it('has no import circle', () => {
    expect(cycles(graph).map((c) => c.join(' -> '))).to.deep.equal([]);
  });

  it('lib/ imports nothing of the project outside lib/', () => {
    expect(importsOf('lib/').filter(([, t]) => !t.startsWith('lib/'))).to.deep.equal([]);
  });

  it('the simulator imports only lib/ and proto/', () => {
    expect(
      importsOf('backends/dpu-sim/').filter(
        ([, t]) => !t.startsWith('lib/') && !t.startsWith('proto/') && !t.startsWith('backends/dpu-sim/'),
      ),
    ).to.deep.equal([]);
  });

  it('the core imports no backend, adapter, pool source or command', () => {
    expect(importsOf('core/').filter(([, t]) => !/^(core|lib|proto)\//.test(t))).to.deep.equal([]);
  });

  it("backends never import each other's rooms (backends/interface/ is shared)", () => {
    const roomOf = (f: string): string => f.split('/').slice(0, 2).join('/');
    expect(
      importsOf('backends/').filter(
        ([f, t]) =>
          t.startsWith('backends/') && roomOf(t) !== roomOf(f) && roomOf(t) !== 'backends/interface',
      ),
    ).to.deep.equal([]);
  });

  it(`keeps at most ${MOST_FILES_AT_CORE_ROOT} files at the core's root (its seams)`, () => {
    const atRoot = files.filter((f) => path.posix.dirname(f) === 'core');
    expect(atRoot.length, atRoot.join(', ')).to.be.at.most(MOST_FILES_AT_CORE_ROOT);
  });

  it(`has no hand-written source file over ${LONGEST_SOURCE_FILE} lines, nor test file over ${LONGEST_TEST_FILE}`, () => {
    const lines = (f: string): number => fs.readFileSync(path.join(ROOT, f), 'utf8').split('\n').length - 1;
    const long = [
      ...files.filter((f) => lines(f) > LONGEST_SOURCE_FILE),
      ...sourceFiles('test').filter((f) => lines(f) > LONGEST_TEST_FILE),
    ].map((f) => `${f}: ${lines(f)}`);
    expect(long).to.deep.equal([]);
  });

  it(`has no source function over ${LONGEST_FUNCTION} lines`, () => {
    expect(files.flatMap((f) => longFunctions(f, LONGEST_FUNCTION))).to.deep.equal([]);
  });
});
