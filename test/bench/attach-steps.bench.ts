import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { attachRequest } from '../support/attach-request';
import { NodeFixture } from '../support/node-fixture';
import { FLOOR_STEPS, benchFloor } from './floor.bench';
import { percentile, ratePerSecond, timeMs } from './stats';
import { WARM_OPS_DEFAULT, warmRounds } from './warm-up';

// Where a warm daemon's attach time goes, step by step, beside the floor's steps from the same run.
// The daemon (Linux backend, in a test-owned node namespace) is started with attach-steps-hook.js
// preloaded (NODE_OPTIONS=--require), which timestamps its own functions; Attach calls are sent one at
// a time over gRPC after an untimed warm-up, as in the daemon row. Not part of `npm run bench`: the
// hook's wrappers cost a few microseconds per step.
//
//   node dist/test/bench/attach-steps.bench.js [count] [warm]
//
// `warm`: untimed attaches (and detaches) first, 3,000 by default (see warm-up.ts); 0 for one round.

const HOOK = path.join(__dirname, 'attach-steps-hook.js');

type Marks = Record<string, number>;

export interface StepsReport {
  /** p50 per step of the daemon's attach, µs, in order. */
  daemon: Array<[string, number]>;
  /** p50 of the whole Attach as the gRPC client sees it, and of a Status round trip, µs. */
  clientAttachP50Us: number;
  statusP50Us: number;
  /** p50 of a gRPC health check round trip, µs: the transport and both ends' gRPC code, nothing else. */
  healthP50Us: number;
  floor: Array<[string, number]>;
  floorAttachP50Us: number;
}

function stepDurations(m: Marks): Array<[string, number]> {
  const at = (k: string): number => m[k] ?? NaN;
  const backendEnd = at('backend:end');
  const storeEnd = at('store:end');
  const inThread = (k: string): number => m[`in-thread:${k}`] ?? NaN;
  const threadParts = ['socket', 'veth', 'workload', 'host', 'alias'].reduce((a, k) => a + inThread(k), 0);
  return [
    ['validate and admit (before the namespace is opened)', at('openNetns:start')],
    ['open and check the namespace', at('openNetns:end') - at('openNetns:start')],
    ['take the workload lock', at('locked') - at('openNetns:end')],
    ['allocate, build the record, plan', at('backend:start') - at('locked')],
    ['backend: host context, plan, until posted to the thread', at('thread:start') - at('backend:start')],
    ['backend: netlink thread, message to answer', at('thread:end') - at('thread:start')],
    ['  in the thread: socket in the namespace', inThread('socket')],
    ['  in the thread: create the veth pair', inThread('veth')],
    ['  in the thread: workload side', inThread('workload')],
    ['  in the thread: host side', inThread('host')],
    ['  in the thread: alias', inThread('alias')],
    ['  the two messages (round trip less the parts)', at('thread:end') - at('thread:start') - threadParts],
    ['    posted until the thread began', at('thread:began') - at('thread:start')],
    ['    its last step until its answer ran here', at('thread:end') - at('thread:began') - threadParts],
    ['backend: after the thread answered', backendEnd - at('thread:end')],
    ['threadpool path: create the veth pair', at('veth:end') - at('veth:start')],
    ['threadpool path: configure both sides', at('sides:end') - at('sides:start')],
    ['(store write, overlapping the backend)', storeEnd - at('store:start')],
    ['store write past the backend', Math.max(0, storeEnd - backendEnd)],
    ['after both, until attach() resolves', at('end') - Math.max(backendEnd, storeEnd)],
    ['orchestrator attach() in all', at('end')],
  ];
}

export async function benchAttachSteps(opts: {
  count: number;
  parallel: number;
  warmOps?: number;
}): Promise<StepsReport> {
  const fx = new NodeFixture({ prefix: 'wnb-', dirPrefix: 'wn-bench-steps-', shape: 'bare' });
  fx.setUp();
  const traceFile = path.join(fx.dir, 'steps.json');
  const workloads = Array.from({ length: opts.count }, () => fx.namespaces.add().path);
  const saved = { options: process.env.NODE_OPTIONS, out: process.env.WN_ATTACH_STEPS_OUT };
  try {
    // The daemon inherits this process's environment.
    process.env.NODE_OPTIONS = `${saved.options ?? ''} --require ${HOOK}`.trim();
    process.env.WN_ATTACH_STEPS_OUT = traceFile;
    const d = await fx.startDaemon({
      dir: path.join(fx.dir, 'daemon'),
      args: ['--pod-cidr', '10.96.0.0/16', '--log-level', 'warn'],
    });
    process.env.NODE_OPTIONS = saved.options;
    if (saved.options === undefined) delete process.env.NODE_OPTIONS;
    process.env.WN_ATTACH_STEPS_OUT = saved.out;
    if (saved.out === undefined) delete process.env.WN_ATTACH_STEPS_OUT;
    const c = d.client;
    const at = (i: number): string => workloads[i % workloads.length] ?? '';
    for (let round = 0; round < warmRounds(opts.warmOps ?? WARM_OPS_DEFAULT, opts.count); round++) {
      await ratePerSecond(
        workloads.map((_, i) => () => c.call(c.raw.attach, attachRequest(`warm-${i}`, at(i)))),
        opts.parallel,
      );
      await ratePerSecond(
        workloads.map((_, i) => () => c.call(c.raw.detach, { workloadId: `warm-${i}`, netns: undefined })),
        opts.parallel,
      );
    }
    const clientMs: number[] = [];
    for (let i = 0; i < opts.count; i++)
      clientMs.push(await timeMs(() => c.call(c.raw.attach, attachRequest(`seq-${i}`, at(i)))));
    for (let i = 0; i < opts.count; i++)
      await c.call(c.raw.detach, { workloadId: `seq-${i}`, netns: undefined });
    const statusMs: number[] = [];
    for (let i = 0; i < opts.count; i++) statusMs.push(await timeMs(() => c.status()));
    const healthMs = await healthRoundTrips(d.socket, opts.count);
    await d.stop();
    const records = (JSON.parse(fs.readFileSync(traceFile, 'utf8')) as Marks[]).slice(-opts.count);
    const per = records.map(stepDurations);
    const daemon = (per[0] ?? []).map(([name], k): [string, number] => [
      name,
      percentile(
        per.map((p) => p[k]?.[1] ?? NaN).filter((v) => Number.isFinite(v)),
        50,
      ),
    ]);
    const floor = await benchFloor({ count: opts.count, parallel: opts.parallel });
    const fa = floor.rows.find((r) => r.op === 'attach');
    return {
      daemon,
      clientAttachP50Us: percentile(clientMs, 50) * 1000,
      statusP50Us: percentile(statusMs, 50) * 1000,
      healthP50Us: percentile(healthMs, 50) * 1000,
      floor: FLOOR_STEPS.map((s, k): [string, number] => [s, floor.attachStepsP50Us[k] ?? NaN]),
      floorAttachP50Us: (fa?.p50Ms ?? NaN) * 1000,
    };
  } finally {
    await fx.cleanup();
  }
}

type HealthCheck = (req: { service: string }, cb: (err: Error | null) => void) => void;

/** `count` health checks, one at a time after as many untimed ones, each timed in ms. */
async function healthRoundTrips(socket: string, count: number): Promise<number[]> {
  const Client = grpc.makeGenericClientConstructor(healthService, 'Health');
  const client = new Client(`unix:${socket}`, grpc.credentials.createInsecure()) as unknown as {
    check: HealthCheck;
    close(): void;
  };
  const check = (): Promise<void> =>
    new Promise((resolve, reject) => client.check({ service: '' }, (err) => (err ? reject(err) : resolve())));
  try {
    for (let i = 0; i < count; i++) await check();
    const out: number[] = [];
    for (let i = 0; i < count; i++) out.push(await timeMs(check));
    return out;
  } finally {
    client.close();
  }
}

if (require.main === module) {
  const count = Number(process.argv[2] ?? 100);
  const warmOps = Number(process.argv[3] ?? WARM_OPS_DEFAULT);
  benchAttachSteps({ count, parallel: 16, warmOps }).then(
    (r) => {
      const row = (name: string, us: number): void =>
        console.log(`  ${name.padEnd(56)} ${Number.isFinite(us) ? us.toFixed(0).padStart(6) : '   n/a'} µs`);
      console.log(
        `count ${count} after ${warmOps} untimed, load ${os.loadavg()[0]?.toFixed(1)}; p50 of each step (they do not add up exactly)`,
      );
      console.log('daemon attach, inside the daemon:');
      for (const [n, v] of r.daemon) row(n, v);
      console.log('seen by the gRPC client:');
      row('Attach round trip', r.clientAttachP50Us);
      row('Status round trip', r.statusP50Us);
      row('health check round trip (the gRPC transport alone)', r.healthP50Us);
      console.log('floor (netlink-floor.c), same run:');
      for (const [n, v] of r.floor) row(n, v);
      row('floor attach in all', r.floorAttachP50Us);
    },
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
