import type { LaneRun } from './mocha-child';

// One summary for all lanes: their counts summed, each lane's time, the slowest files, and every way a
// lane can fail said in words: failing tests, or a process that ended without finishing its run.

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(0)} s`;
}

/** Why a lane failed, or undefined when it passed. */
export function laneProblem(run: LaneRun): string | undefined {
  if (run.signal) return `its mocha process was killed by ${run.signal}`;
  if (!run.result) return `its mocha process ended (exit code ${run.exitCode}) before the end of its run`;
  if (run.result.failures > 0) return `${run.result.failures} failing`;
  if (run.exitCode !== 0) return `its mocha process exited with code ${run.exitCode}`;
  return undefined;
}

/** The summary's lines; `ok` is false when any lane failed or crashed. */
export function summarize(runs: LaneRun[], wallMs: number, slowest = 10): { ok: boolean; lines: string[] } {
  const sum = (k: 'passes' | 'failures' | 'pending'): number =>
    runs.reduce((n, r) => n + (r.result?.[k] ?? 0), 0);
  const problems = runs.flatMap((r) => {
    const p = laneProblem(r);
    return p ? [`lane ${r.lane}: ${p}`] : [];
  });
  const files = runs.flatMap((r) => (r.result?.files ?? []).map((f) => ({ ...f, lane: r.lane })));
  const lines = [
    '',
    `lanes: ${runs.length}, wall time ${seconds(wallMs)}`,
    ...runs.map(
      (r) =>
        `  ${r.lane.padEnd(10)} ${String(r.files.length).padStart(3)} files  ${seconds(r.ms).padStart(6)}  ` +
        (r.result
          ? `${r.result.passes} passing, ${r.result.failures} failing, ${r.result.pending} pending`
          : 'no result'),
    ),
    `slowest files:`,
    ...files
      .sort((a, b) => b.ms - a.ms)
      .slice(0, slowest)
      .map((f) => `  ${seconds(f.ms).padStart(6)}  ${f.lane.padEnd(10)} ${f.file}`),
    '',
    `${sum('passes')} passing, ${sum('failures')} failing, ${sum('pending')} pending (${seconds(wallMs)})`,
    ...runs.flatMap((r) => (r.result?.failed ?? []).map((t) => `  failed in ${r.lane}: ${t}`)),
    ...problems,
  ];
  return { ok: problems.length === 0, lines };
}
