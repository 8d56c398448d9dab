import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnInNetns } from '../e2e/support/spawn-in-netns';
import { runBurst } from '../reliability/api-burst';
import { sampleStatusDuring, type StatusLatency } from '../reliability/status-sampler';
import { NodeFixture } from '../support/node-fixture';
import { cpuSince, processCpu } from './process-cpu';
import { loopStallMs, percentile } from './stats';
import { childOutput } from '../support/child-output';
import { WARM_OPS_DEFAULT, warmRounds } from './warm-up';

// A burst against the real daemon (Linux backend, in a test-owned node namespace): N Attach calls at
// once from a client process of their own, then N Detach calls, as test/reliability/load.test.ts does.
// Three bursts of each, measured per burst and given as medians: the daemon's CPU (user + system, from
// /proc) per operation, Status latency sampled every 10 ms on a connection of its own, and the
// daemon's largest event-loop stall, read from its Prometheus endpoint (prom-client's
// monitorEventLoopDelay, 10 ms resolution, reset by each scrape: one scrape before the burst, one
// after). The metric is the longest interval between two checks, so the 10 ms between checks is taken
// off: what is left is how long the loop was held.
//
//   node dist/test/bench/burst.bench.js [N]

export interface BurstMetric {
  name: string;
  value: number;
  unit: string;
}

const METRICS_ADDR = '127.0.0.1:9464';

/** prom-client's default eventLoopMonitoringPrecision, which the daemon keeps. */
const PROM_LOOP_RESOLUTION_MS = 10;

/** Measured bursts of each kind; the rows give their medians (CPU: over all of them). */
const BURST_ROUNDS = 3;

interface Measured {
  ms: number;
  cpu: { totalMs: number; systemMs: number };
  latency: StatusLatency;
  loopMaxMs: number;
}

/** The daemon's largest event-loop stall since the previous scrape, in ms (see loopStallMs). */
async function scrapeLoopMaxMs(nodeNetnsPath: string): Promise<number> {
  const { code, stdout, stderr } = await childOutput(
    spawnInNetns(nodeNetnsPath, 'curl', ['-sS', '--max-time', '5', `http://${METRICS_ADDR}/metrics`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  const m = /^nodejs_eventloop_lag_max_seconds(?:\{[^}]*\})? ([0-9.eE+-]+)$/m.exec(stdout);
  if (code !== 0 || !m?.[1]) throw new Error(`scraping the daemon's metrics failed (${code}): ${stderr}`);
  return loopStallMs(Number(m[1]) * 1000, PROM_LOOP_RESOLUTION_MS);
}

export async function benchDaemonBurst(opts: {
  burst: number;
  /** Untimed attaches first, in bursts of the same size (see warm-up.ts). */
  warmOps?: number;
}): Promise<BurstMetric[]> {
  const n = opts.burst;
  const fx = new NodeFixture({ prefix: 'wnb-', dirPrefix: 'wn-bench-burst-' });
  try {
    fx.setUp();
    const nodePath = `/var/run/netns/${fx.node}`;
    const pathsFile = path.join(fx.dir, 'netns-paths');
    fs.writeFileSync(pathsFile, Array.from({ length: n }, () => fx.namespaces.add().path).join('\n'));
    // The loop sampled at the bench's resolution, finer than the daemon's default (100 ms).
    const configFile = path.join(fx.dir, 'config.json');
    fs.writeFileSync(configFile, JSON.stringify({ eventLoopResolutionMs: PROM_LOOP_RESOLUTION_MS }));
    const d = await fx.startDaemon({
      dir: path.join(fx.dir, 'daemon'),
      args: [
        ...['--config', configFile, '--pod-cidr', '10.94.0.0/16'],
        ...['--log-level', 'warn', '--metrics-listen', METRICS_ADDR],
      ],
    });
    const pid = d.child.pid;
    if (pid === undefined) throw new Error('daemon has no pid');
    const burst = (op: 'attach' | 'detach', prefix: string) =>
      runBurst({
        socket: d.socket,
        op,
        count: n,
        prefix,
        netnsPath: `@${pathsFile}`,
        ifName: 'eth0',
        channels: 1,
      });
    const failures = (r: Awaited<ReturnType<typeof burst>>): number =>
      r.outcomes.filter((o) => o.code !== 0).length;

    // Warm-up, not timed (the daemon's JIT), as for every other row.
    for (let round = 0; round < warmRounds(opts.warmOps ?? WARM_OPS_DEFAULT, n); round++) {
      await burst('attach', 'warm-');
      await burst('detach', 'warm-');
    }

    const measured = async (op: 'attach' | 'detach'): Promise<Measured> => {
      await scrapeLoopMaxMs(nodePath);
      const cpu = processCpu(pid);
      const { result, latency } = await sampleStatusDuring(d.socket, () => burst(op, 'burst-'));
      const used = cpuSince(pid, cpu);
      const loopMaxMs = await scrapeLoopMaxMs(nodePath);
      const failed = failures(result);
      if (failed > 0) throw new Error(`${failed} of ${n} ${op} calls of the burst failed`);
      return { ms: result.ms, cpu: used, latency, loopMaxMs };
    };
    // One burst's largest stall is a single sample of a noisy quantity: three of each, and medians.
    const attach: Measured[] = [];
    const detach: Measured[] = [];
    for (let k = 0; k < BURST_ROUNDS; k++) {
      attach.push(await measured('attach'));
      detach.push(await measured('detach'));
    }

    const rows = (op: string, rs: Measured[]): BurstMetric[] => {
      const med = (f: (r: Measured) => number): number => percentile(rs.map(f), 50);
      const cpu = rs.reduce((a, r) => ({ t: a.t + r.cpu.totalMs, s: a.s + r.cpu.systemMs }), { t: 0, s: 0 });
      const per = n * rs.length;
      return [
        { name: `daemon: ${n} concurrent ${op}es, wall time`, value: med((r) => r.ms), unit: 'ms' },
        { name: `daemon CPU per ${op}, ${n} at once`, value: cpu.t / per, unit: 'ms' },
        { name: `daemon system CPU per ${op}, ${n} at once`, value: cpu.s / per, unit: 'ms' },
        {
          name: `daemon's largest event-loop stall under ${n} concurrent ${op}es`,
          value: med((r) => r.loopMaxMs),
          unit: 'ms',
        },
        {
          name: `daemon's largest event-loop stall under ${n} concurrent ${op}es, worst burst`,
          value: Math.max(...rs.map((r) => r.loopMaxMs)),
          unit: 'ms',
        },
        { name: `Status p50 under ${n} concurrent ${op}es`, value: med((r) => r.latency.p50Ms), unit: 'ms' },
        { name: `Status p99 under ${n} concurrent ${op}es`, value: med((r) => r.latency.p99Ms), unit: 'ms' },
        {
          name: `Status max under ${n} concurrent ${op}es`,
          value: Math.max(...rs.map((r) => r.latency.maxMs)),
          unit: 'ms',
        },
      ];
    };
    return [...rows('attach', attach), ...rows('detach', detach)];
  } finally {
    await fx.cleanup();
  }
}

if (require.main === module) {
  const n = Number(process.argv[2] ?? 200);
  benchDaemonBurst({ burst: n }).then(
    (rows) => {
      for (const r of rows) console.log(`${r.name}: ${r.value.toFixed(2)} ${r.unit}`);
    },
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
