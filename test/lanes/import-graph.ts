import * as fs from 'node:fs';
import * as path from 'node:path';

// The test-local modules a test file loads, followed transitively through its relative requires. Read
// from the compiled JavaScript, where imports used only for types are gone: what a file loads is what it
// uses, so a file's lane follows from this graph rather than from a list of names that goes stale.

const RELATIVE_REQUIRE = /\brequire\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g;

/** The .js files `file` requires directly by a relative path. */
export function directRequires(file: string, text = fs.readFileSync(file, 'utf8')): string[] {
  const found = new Set<string>();
  for (const m of text.matchAll(RELATIVE_REQUIRE)) {
    const base = path.resolve(path.dirname(file), m[1]!);
    const target = [`${base}.js`, base, path.join(base, 'index.js')].find(
      (f) => f.endsWith('.js') && fs.existsSync(f),
    );
    if (target) found.add(target);
  }
  return [...found];
}

/**
 * Every module reachable from `file` (itself included), staying inside `within`. A module for which
 * `opaque` returns true is included but not followed: what it does depends on how it is called.
 */
export function requireClosure(file: string, within: string, opaque: (f: string) => boolean): Set<string> {
  const seen = new Set<string>([file]);
  const todo = [file];
  for (let f = todo.pop(); f !== undefined; f = todo.pop()) {
    if (f !== file && opaque(f)) continue;
    for (const next of directRequires(f)) {
      if (seen.has(next) || !next.startsWith(within + path.sep)) continue;
      seen.add(next);
      todo.push(next);
    }
  }
  return seen;
}
