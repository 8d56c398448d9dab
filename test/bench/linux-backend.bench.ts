import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import type { DataplaneResult } from '../../core/backend';
import { LinuxBackend } from '../../backends/linux/linux-backend';
import { netnsInode } from '../support/netns-fixture';
import { NetnsSet, netnsPath } from '../support/netns';
import { loopStallMs, percentile } from './stats';
import { attachTo, type TestSpec } from '../support/attach-spec';
import { WARM_OPS_DEFAULT, warmRounds } from './warm-up';

// The Linux backend measured directly (no daemon, no API): attach and detach latency one at a time,
// then the rate with `parallel` operations in flight, and the worst event-loop stall meanwhile. Runs in
// test-owned namespaces (a node namespace standing for the host, one namespace per workload) that it
// creates before and deletes after; namespace creation is not timed. It first runs 3,000 untimed
// attaches and detaches (warm-up.ts).
//
//   node dist/test/bench/linux-backend.bench.js [count] [parallel] [threadpool]

export interface BenchRow {
  name: string;
  op: 'attach' | 'detach';
  p50Ms: number;
  p99Ms: number;
  perSecondAtParallel: number;
  maxEventLoopDelayMs: number;
  /**
   * User + system CPU of this process per operation over the rate run: the backend, its threadpool
   * and the kernel's work in their context, plus the benchmark's own small loop.
   */
  cpuMsPerOp: number;
  cpuSysMsPerOp: number;
}

interface Phase {
  latencies: number[];
  perSecond: number;
  maxEventLoopDelayMs: number;
  cpuMsPerOp: number;
  cpuSysMsPerOp: number;
}

function specFor(ns: string, i: number): TestSpec {
  const workloadId = `bench-${ns}`;
  return {
    key: `${workloadId}/eth0`,
    workloadId,
    ifName: 'eth0',
    netnsPath: netnsPath(ns),
    netnsInode: netnsInode(ns),
    mtu: 1500,
    ips: [
      {
        family: 4,
        address: `10.252.${Math.floor(i / 250)}.${(i % 250) + 2}`,
        gateway: '169.254.1.1',
      },
    ],
  };
}

/** Runs `ops` with `parallel` in flight, timing each and the whole, watching the event loop. */
async function runPhase(ops: Array<() => Promise<unknown>>, parallel: number): Promise<Phase> {
  const histogram: IntervalHistogram = monitorEventLoopDelay({ resolution: 1 });
  histogram.enable();
  const latencies: number[] = [];
  let next = 0;
  const cpu = process.cpuUsage();
  const started = process.hrtime.bigint();
  const worker = async (): Promise<void> => {
    while (next < ops.length) {
      const op = ops[next++];
      if (!op) continue;
      const t = process.hrtime.bigint();
      await op();
      latencies.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, ops.length) }, worker));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const used = process.cpuUsage(cpu);
  histogram.disable();
  return {
    latencies,
    perSecond: ops.length / seconds,
    maxEventLoopDelayMs: loopStallMs(histogram.max / 1e6, 1),
    cpuMsPerOp: (used.user + used.system) / 1000 / ops.length,
    cpuSysMsPerOp: used.system / 1000 / ops.length,
  };
}

export async function benchLinuxBackend(opts: {
  count: number;
  parallel: number;
  /** The backend's netlink thread (default) or, false, its threadpool path. */
  netlinkThread?: boolean;
  /** Untimed attaches first (see warm-up.ts). */
  warmOps?: number;
}): Promise<BenchRow[]> {
  const pool = new NetnsSet('wnl-');
  let backend: LinuxBackend | undefined;
  try {
    const node = pool.addNode('10.250.0.1').name;
    const names = pool.addMany(opts.count, 'bench').map((ns) => ns.name);
    const specs = names.map((n, i) => specFor(n, i));
    backend = new LinuxBackend({ hostNetnsPath: netnsPath(node), netlinkThread: opts.netlinkThread });
    await backend.start();
    const b = backend;

    const results = new Map<string, DataplaneResult>();
    const attachOps = specs.map((s) => async () => results.set(s.key, await attachTo(b, s)));
    const detachOps = specs.map((s) => () => b.detach({ ...s, dataplane: results.get(s.key) }));

    // Warm-up, not timed: loads libc through koffi and lets the JIT optimise the hot paths.
    for (let round = 0; round < warmRounds(opts.warmOps ?? WARM_OPS_DEFAULT, opts.count); round++) {
      await runPhase(attachOps, opts.parallel);
      await runPhase(detachOps, opts.parallel);
    }

    const attachSeq = await runPhase(attachOps, 1);
    const detachSeq = await runPhase(detachOps, 1);
    const attachPar = await runPhase(attachOps, opts.parallel);
    const detachPar = await runPhase(detachOps, opts.parallel);

    const row = (
      name: string,
      op: 'attach' | 'detach',
      lat: Phase,
      rate: Phase,
      stall: number,
    ): BenchRow => ({
      name,
      op,
      p50Ms: percentile(lat.latencies, 50),
      p99Ms: percentile(lat.latencies, 99),
      perSecondAtParallel: rate.perSecond,
      maxEventLoopDelayMs: stall,
      cpuMsPerOp: rate.cpuMsPerOp,
      cpuSysMsPerOp: rate.cpuSysMsPerOp,
    });
    const inFlight = `(${opts.parallel} in flight)`;
    // Per op: its latency alone (its throughput and worst stall over both phases), then in flight.
    const rowsOf = (op: 'attach' | 'detach', seq: Phase, par: Phase): BenchRow[] => [
      row(`linux-backend ${op}`, op, seq, par, Math.max(seq.maxEventLoopDelayMs, par.maxEventLoopDelayMs)),
      row(`linux-backend ${op} ${inFlight}`, op, par, par, par.maxEventLoopDelayMs),
    ];
    return [...rowsOf('attach', attachSeq, attachPar), ...rowsOf('detach', detachSeq, detachPar)];
  } finally {
    await backend?.stop();
    pool.cleanup();
  }
}

if (require.main === module) {
  const count = Number(process.argv[2] ?? 200);
  const parallel = Number(process.argv[3] ?? 16);
  const netlinkThread = process.argv[4] !== 'threadpool';
  benchLinuxBackend({ count, parallel, netlinkThread }).then(
    (rows) => {
      console.log(
        `count=${count} parallel=${parallel} ${netlinkThread ? 'netlink thread' : 'threadpool path'} UV_THREADPOOL_SIZE=${process.env.UV_THREADPOOL_SIZE ?? '4 (default)'}`,
      );
      console.table(
        rows.map((r) => ({
          ...r,
          p50Ms: +r.p50Ms.toFixed(2),
          p99Ms: +r.p99Ms.toFixed(2),
          perSecondAtParallel: Math.round(r.perSecondAtParallel),
          maxEventLoopDelayMs: +r.maxEventLoopDelayMs.toFixed(1),
          cpuMsPerOp: +r.cpuMsPerOp.toFixed(3),
        })),
      );
    },
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
