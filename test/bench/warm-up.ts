// How long a long-running process (the daemon, or the benchmark process for the in-process rows) runs
// before it is measured. V8 optimises a function once it has run enough bytecode (its interrupt
// budget), so code that runs once per attach is optimised only after thousands of attaches, and until
// then V8's background threads keep compiling. Measured on a fresh daemon (Linux backend, rounds of 200
// attaches then 200 detaches at 16 in flight, CPU of each of its threads from /proc): ~1.5 ms of CPU per
// attach in the first rounds, of which ~0.35 ms on V8's platform threads, settling at 0.7–0.8 ms (and
// ~0.03 ms) after ~2,600 attaches; a sequential attach over gRPC went from ~2.0 to ~1.55 ms p50. A
// node's daemon serves pod events for days, so its rows are measured once it has settled, and the
// daemon row is also measured fresh (its first calls after start), beside it.

/** Untimed attaches (and as many detaches) before a long-running process is measured. */
export const WARM_OPS_DEFAULT = 3000;

/** Rounds of `perRound` operations that make at least `ops` (at least one round: page cache, lazy loads). */
export function warmRounds(ops: number, perRound: number): number {
  return Math.max(1, Math.ceil(ops / Math.max(1, perRound)));
}
