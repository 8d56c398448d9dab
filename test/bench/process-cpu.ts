import * as fs from 'node:fs';

// CPU time of another process (the daemon under test), read from /proc. Kernel work done in the
// process's context (every netlink write) counts as its system time.
//
// The total is the sum of the threads' run time in /proc/<pid>/task/*/schedstat (nanoseconds, exact);
// the user/system split comes from /proc/<pid>/stat, whose utime/stime are in clock ticks (10 ms here),
// too coarse for a total over a few hundred milliseconds. Node's threads (libuv pool, V8 helpers) live
// as long as the process, so no thread's time is lost to an exit in between two readings.

export interface CpuReading {
  /** User + system, ms. */
  totalMs: number;
  /** System part, ms (tick resolution). */
  systemMs: number;
}

/** USER_HZ: /proc reports times in 1/100 s on every Linux architecture that matters here. */
const TICK_MS = 10;

export function processCpu(pid: number): CpuReading {
  let totalNs = 0;
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      totalNs += Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // The thread exited between the listing and the read.
    }
  }
  // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const stime = Number(fields[12]);
  return { totalMs: totalNs / 1e6, systemMs: stime * TICK_MS };
}

/** CPU used by `pid` between two readings. */
export function cpuSince(pid: number, before: CpuReading): CpuReading {
  const now = processCpu(pid);
  return { totalMs: now.totalMs - before.totalMs, systemMs: now.systemMs - before.systemMs };
}
