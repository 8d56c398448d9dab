// One row of the benchmark's dataplane / CNI table: what an operation costs, measured the same way for
// the floor, the reference plugins and workloadnet, so rows compare.

export interface OpRow {
  name: string;
  op: 'attach' | 'detach';
  /** Sequential latency of one operation (one workload at a time). */
  p50Ms: number;
  p99Ms: number;
  /** Completed operations per second with `parallel` in flight. */
  perSecondAtParallel: number;
  /** User + system CPU per operation over the rate run, of the processes the row's producer names. */
  cpuMsPerOp: number;
  /** Its system part. */
  cpuSysMsPerOp: number;
}
