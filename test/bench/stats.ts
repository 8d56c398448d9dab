// Small statistics helpers shared by the benchmarks: percentiles over measured samples and a bounded
// parallel runner that reports the achieved rate.

export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx] ?? NaN;
}

/** Times fn once, in milliseconds. */
export async function timeMs(fn: () => Promise<unknown>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/** Runs jobs with `parallel` in flight and returns completions per second. */
export async function ratePerSecond(jobs: Array<() => Promise<unknown>>, parallel: number): Promise<number> {
  let next = 0;
  const t = process.hrtime.bigint();
  const worker = async (): Promise<void> => {
    while (next < jobs.length) {
      const job = jobs[next++];
      if (job) await job();
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, jobs.length) }, worker));
  const seconds = Number(process.hrtime.bigint() - t) / 1e9;
  return jobs.length / seconds;
}

/**
 * The largest stall of an event loop, in ms, from the largest interval `monitorEventLoopDelay` saw.
 * Node records the whole interval between two of its checks, `resolutionMs` included (an idle loop
 * watched at 10 ms reports about 10.1 ms), so the stall is what lies beyond that.
 */
export function loopStallMs(maxIntervalMs: number, resolutionMs: number): number {
  return Math.max(0, maxIntervalMs - resolutionMs);
}
