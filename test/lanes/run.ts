import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { durationsFile, saveDurations } from './balance';
import { startMocha, type LaneRun, type MochaChild } from './mocha-child';
import { planLanes, specFiles, staleFiles, type PlannedLane } from './plan';
import { summarize } from './summary';

// `npm test`: the whole suite in lanes, in parallel. Run one file after another, the suite takes over
// half an hour on two CPUs, and most of that is waiting (timers, leases, processes), not computing. Files
// that use one machine-wide resource (the real etcd; containerd, podman and the torture churn; figures of
// their own process's heap) each run in a lane of their own, one after another inside it; every other
// file only touches test-owned namespaces, files and ports, and those are split over a few workers. Each
// lane is one mocha process over its files, with .mocharc.json's settings.
//
//   node dist/test/lanes/run.js [--serial] [--workers N] [--plan] [--record] [--titles FILE] [files…]
//
// --serial runs every file in one mocha process, as plain `mocha` does (for debugging); --plan prints
// the lanes without running them; --record rewrites test/lanes/durations.json with this run's times;
// --titles writes the full titles of the passing tests, one a line, to compare two runs.

const ROOT = path.resolve(__dirname, '..', '..', '..');

interface Options {
  serial: boolean;
  workers: number;
  plan: boolean;
  record: boolean;
  titles?: string;
  files: string[];
}

/**
 * Shared workers beside the lanes (which take shared files too once their own are done): one on two
 * CPUs, where four processes already keep both busy, up to three on larger machines.
 */
function defaultWorkers(): number {
  return Math.min(3, Math.max(1, os.availableParallelism() - 1));
}

function parseArgs(argv: string[]): Options {
  const o: Options = { serial: false, workers: defaultWorkers(), plan: false, record: false, files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--serial') o.serial = true;
    else if (a === '--plan') o.plan = true;
    else if (a === '--record') o.record = true;
    else if (a === '--titles') o.titles = argv[++i];
    else if (a === '--workers') {
      o.workers = Number(argv[++i]);
      if (!Number.isInteger(o.workers) || o.workers < 1)
        throw new Error(`--workers wants a whole number ≥ 1`);
    } else if (a.startsWith('--'))
      throw new Error(`unknown option ${a} (see the header of test/lanes/run.ts)`);
    else o.files.push(a);
  }
  return o;
}

function lanesOf(o: Options): PlannedLane[] {
  const all = o.files.length > 0 ? o.files : specFiles(ROOT);
  const stale = staleFiles(all, ROOT);
  for (const f of stale) console.log(`skipped ${f}: compiled from a test file that is gone (stale dist/)`);
  const files = all.filter((f) => !stale.includes(f));
  if (o.serial) return [{ name: 'serial', why: 'every file in one process (--serial)', files }];
  return planLanes(files, ROOT, o.workers);
}

async function main(): Promise<number> {
  const o = parseArgs(process.argv.slice(2));
  const lanes = lanesOf(o);
  const width = Math.max(...lanes.map((l) => l.name.length));
  for (const l of lanes) {
    const est = l.seconds === undefined ? '' : ` (~${l.seconds} s)`;
    console.log(`lane ${l.name.padEnd(width)} ${String(l.files.length).padStart(3)} files${est}: ${l.why}`);
  }
  if (o.plan) {
    for (const l of lanes) console.log(`\n${l.name}:\n${l.files.map((f) => `  ${f}`).join('\n')}`);
    return 0;
  }
  const began = Date.now();
  const children: MochaChild[] = lanes.map((l) =>
    startMocha(l.name, l.files, ROOT, `${l.name.padEnd(width)} │ `),
  );
  // Ctrl-C or a CI timeout: every lane runs its after hooks (mocha does on SIGINT), then the summary.
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.on(signal, () => children.forEach((c) => c.kill(signal === 'SIGTERM' ? 'SIGINT' : signal)));
  const runs: LaneRun[] = await Promise.all(children.map((c) => c.done));
  const { ok, lines } = summarize(runs, Date.now() - began);
  console.log(lines.join('\n'));
  if (o.record)
    saveDurations(
      durationsFile(ROOT),
      runs.flatMap((r) => r.result?.files ?? []),
      ROOT,
    );
  if (o.titles)
    fs.writeFileSync(
      o.titles,
      runs
        .flatMap((r) => r.result?.passed ?? [])
        .sort()
        .join('\n') + '\n',
    );
  return ok ? 0 : 1;
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 2;
  },
);
