import * as fs from 'node:fs';
import * as path from 'node:path';
import { durationsFile, estimates, fill, loadDurations } from './balance';
import { classify, LANE_RULES, ruleModules, sourceOf, type LaneName } from './classify';

// The plan of a run: which compiled test files exist (the `spec` of .mocharc.json), and which process
// runs each: one per lane of a machine-wide resource, and a few workers sharing the rest.

export interface PlannedLane {
  name: string;
  why: string;
  files: string[];
  /** Estimated from durations.json. */
  seconds?: number;
}

const SHARED = 'test-owned namespaces, files and ports only';

function globToRegExp(glob: string): RegExp {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (glob.startsWith('**/', i)) {
      re += '(?:.*/)?';
      i += 2;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

function walk(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? walk(p) : [p];
  });
}

/** The files `.mocharc.json`'s spec names, relative to `root`, sorted. */
export function specFiles(root: string): string[] {
  const rc = JSON.parse(fs.readFileSync(path.join(root, '.mocharc.json'), 'utf8')) as {
    spec?: string | string[];
  };
  const globs = rc.spec === undefined ? [] : Array.isArray(rc.spec) ? rc.spec : [rc.spec];
  const found = globs.flatMap((g) => {
    const base = g.slice(0, g.search(/[*?[]/) === -1 ? g.length : g.search(/[*?[]/)).replace(/[^/]*$/, '');
    const re = globToRegExp(g);
    return walk(path.join(root, base))
      .map((f) => path.relative(root, f).split(path.sep).join('/'))
      .filter((f) => re.test(f));
  });
  return [...new Set(found)].sort();
}

/** Compiled test files whose source is gone (a test moved or deleted since dist/ was built). */
export function staleFiles(files: string[], root: string): string[] {
  return files.filter((f) => !fs.existsSync(sourceOf(f, root)));
}

/** The lanes for `files`: resource lanes serial, shared files over `workers` processes. */
export function planLanes(files: string[], root: string, workers: number): PlannedLane[] {
  // A rule naming a module that moved would silently send its files to the shared workers.
  const gone = ruleModules().filter((m) => !fs.existsSync(path.join(root, `${m}.ts`)));
  if (gone.length > 0)
    throw new Error(
      `test/lanes/classify.ts names test modules that are gone: ${gone.join(', ')}; update its rules`,
    );
  const byLane = new Map<LaneName, string[]>();
  for (const f of files) {
    const { lane } = classify(f, root);
    byLane.set(lane, [...(byLane.get(lane) ?? []), f]);
  }
  const lanes: PlannedLane[] = LANE_RULES.filter((r) => byLane.has(r.lane)).map((r) => ({
    name: r.lane,
    why: r.why,
    files: byLane.get(r.lane) ?? [],
  }));
  for (let i = 1; i <= workers; i++) lanes.push({ name: `shared-${i}`, why: SHARED, files: [] });
  // A lane's process takes shared files too once its own are done (the measuring ones before any other,
  // so that no other file's garbage is on the heap they measure): no process idles while others queue.
  const shared = byLane.get('shared') ?? [];
  const seconds = estimates(files, loadDurations(durationsFile(root)), root);
  const filled = fill(
    lanes.map((l) => l.files),
    shared,
    seconds,
  );
  return lanes
    .map((l, i) => ({
      ...l,
      files: filled[i] ?? [],
      seconds: (filled[i] ?? []).reduce((n, f) => n + (seconds.get(f) ?? 0), 0),
    }))
    .filter((l) => l.files.length > 0);
}
