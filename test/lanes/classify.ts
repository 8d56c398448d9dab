import * as fs from 'node:fs';
import * as path from 'node:path';
import { directRequires, requireClosure } from './import-graph';

// Which lane a test file runs in, from what it uses: the test modules it loads, and a few words in its
// own source. A lane is a machine-wide resource that only one suite may use at a time; every other file
// is "shared" and goes to one of the parallel workers.

export type LaneName = 'etcd' | 'runtime' | 'measure' | 'shared';

interface LaneRule {
  lane: Exclude<LaneName, 'shared'>;
  /** Why these files cannot run beside each other. */
  why: string;
  /** Test modules (from the repository root, no extension) whose use puts a file in this lane. */
  modules?: string[];
  /** Rigs that start the resource only when asked to: the lane applies when the caller's text asks. */
  rigs?: { module: string; asked: RegExp }[];
  /** Words in the test file's own source that put it in this lane. */
  text?: RegExp;
}

/** First match wins. */
export const LANE_RULES: readonly LaneRule[] = [
  {
    lane: 'etcd',
    why: 'the real 3-member etcd on fixed ports 2379/2389/2399 with 50 ms heartbeats (one at a time)',
    modules: ['test/support/etcd-cluster'],
    rigs: [{ module: 'test/support/fabric-cluster', asked: /source:\s*['"]etcd['"]/ }],
  },
  {
    lane: 'runtime',
    why: "the machine's containerd and podman, and the torture churn: minutes of CPU each (one at a time)",
    modules: ['test/e2e/support/containerd', 'test/packaging/image-build', 'test/support/torture-rig'],
  },
  {
    lane: 'measure',
    why: "figures of this process's heap or event loop: no other file's garbage or timers in them",
    text: /\bmemoryUsage\(|monitorEventLoopDelay|getHeapStatistics|eventLoopUtilization/,
  },
];

/** Every test module the rules name (no extension), to check that none has moved away. */
export function ruleModules(): string[] {
  return LANE_RULES.flatMap((r) => [...(r.modules ?? []), ...(r.rigs ?? []).map((g) => g.module)]);
}

/** The test source (test/….ts) of a compiled file (dist/test/….js), both from `root`. */
export function sourceOf(compiled: string, root: string): string {
  const rel = path.relative(path.join(root, 'dist'), path.resolve(root, compiled));
  return path.join(root, rel.replace(/\.js$/, '.ts'));
}

/** The lane of one compiled test file, and the rule's reason. */
export function classify(compiled: string, root: string): { lane: LaneName; why: string } {
  const js = (m: string): string => path.join(root, 'dist', `${m}.js`);
  const file = path.resolve(root, compiled);
  const rigs = LANE_RULES.flatMap((r) => r.rigs ?? []).map((g) => js(g.module));
  const closure = requireClosure(file, path.join(root, 'dist', 'test'), (f) => rigs.includes(f));
  const own = fs.readFileSync(sourceOf(compiled, root), 'utf8');
  for (const rule of LANE_RULES) {
    const byModule = (rule.modules ?? []).some((m) => closure.has(js(m)));
    const byRig = (rule.rigs ?? []).some((g) =>
      [...closure].some((f) => {
        const text = fs.readFileSync(f, 'utf8');
        return g.asked.test(text) && directRequires(f, text).includes(js(g.module));
      }),
    );
    const byText = rule.text?.test(own) ?? false;
    if (byModule || byRig || byText) return { lane: rule.lane, why: rule.why };
  }
  return { lane: 'shared', why: 'no machine-wide resource: test-owned namespaces, files and ports only' };
}
