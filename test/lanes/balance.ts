import * as fs from 'node:fs';
import * as path from 'node:path';
import type { FileResult } from './lane-result';

// Spreading the shared files over the processes so that they all end together: each file's seconds come
// from the last recorded run (durations.json, rewritten by `--record`), a file not in it counts as the
// median, and files go longest first to the process with the least to do.

/** The checked-in table, beside this file's source. */
export function durationsFile(root: string): string {
  return path.join(root, 'test', 'lanes', 'durations.json');
}

/** The table's key for a compiled test file: its path under dist/test, without extension. */
export function durationKey(compiled: string, root: string): string {
  return path
    .relative(path.join(root, 'dist', 'test'), path.resolve(root, compiled))
    .replace(/\.js$/, '')
    .split(path.sep)
    .join('/');
}

export function loadDurations(file: string): Map<string, number> {
  try {
    const parsed: unknown = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (typeof parsed !== 'object' || parsed === null) return new Map();
    return new Map(Object.entries(parsed).filter((e): e is [string, number] => typeof e[1] === 'number'));
  } catch {
    return new Map();
  }
}

/**
 * Writes the seconds each file took (whole seconds, keys sorted, so a diff of the table reads well),
 * keeping the other files' figures and dropping those of files no longer in test/.
 */
export function saveDurations(file: string, results: FileResult[], root: string): void {
  const exists = (key: string): boolean => fs.existsSync(path.join(root, 'test', `${key}.ts`));
  const table = new Map([...loadDurations(file)].filter(([key]) => exists(key)));
  for (const r of results) table.set(durationKey(r.file, root), Math.max(1, Math.round(r.ms / 1000)));
  const sorted = Object.fromEntries([...table].sort(([a], [b]) => a.localeCompare(b)));
  fs.writeFileSync(file, `${JSON.stringify(sorted, null, 2)}\n`);
}

/** The estimate for each file, in seconds. */
export function estimates(files: string[], table: Map<string, number>, root: string): Map<string, number> {
  const known = [...table.values()].sort((a, b) => a - b);
  const median = known[Math.floor(known.length / 2)] ?? 1;
  return new Map(files.map((f) => [f, table.get(durationKey(f, root)) ?? median]));
}

/**
 * Adds `files` to `bins` (each with the files it must run, e.g. a lane's own) so that the bins end
 * about together: longest first, each to the bin with the least estimated time so far.
 */
export function fill(bins: string[][], files: string[], seconds: Map<string, number>): string[][] {
  const total = (fs: string[]): number => fs.reduce((n, f) => n + (seconds.get(f) ?? 0), 0);
  const out = bins.map((b) => ({ files: [...b], total: total(b) }));
  const longestFirst = [...files].sort((a, b) => (seconds.get(b) ?? 0) - (seconds.get(a) ?? 0));
  for (const f of longestFirst) {
    const least = out.reduce((a, b) => (b.total < a.total ? b : a));
    least.files.push(f);
    least.total += seconds.get(f) ?? 0;
  }
  return out.map((b) => b.files);
}
