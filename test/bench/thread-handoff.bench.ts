import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { percentile } from './stats';

// How long a job posted to a worker thread waits before the worker begins it, the hop that the
// per-step benchmark shows between the daemon's main thread and its netlink thread ("posted until the
// thread began"). Two knobs: how long the worker works on each job (the netlink thread's kernel work
// is ~0.45 ms), and how long the main thread keeps running after posting (the daemon starts the store's
// write and returns to gRPC). Two ways of posting: a MessagePort (what the netlink thread uses) and a
// SharedArrayBuffer with Atomics.wait/notify/waitAsync (no structured clone, no event-loop turn on the
// worker). Jobs are one at a time, 1 ms apart, as in a sequential attach benchmark. Last, the two
// threads pinned to different CPUs (with taskset), which prices a wake-up on an idle CPU. Not part of
// `npm run bench`: it measures the machine's scheduler, not workloadnet.
//
//   node dist/test/bench/thread-handoff.bench.js [count]

type Mode = 'port' | 'atomics';

interface Setup {
  mode: Mode;
  workUs: number;
  shared: SharedArrayBuffer;
  /** CPU the worker pins itself to, if any. */
  cpu?: number;
}

/** Slots in the shared buffer: posted and answered sequence numbers, then two timestamps (µs). */
const POSTED = 0;
const ANSWERED = 1;

/** Atomics.waitAsync is in Node 20 but not in the ES2022 library this project compiles against. */
const atomics = Atomics as typeof Atomics & {
  waitAsync(ta: Int32Array, index: number, value: number): { async: boolean; value: Promise<unknown> };
};

const nowUs = (): number => Number(process.hrtime.bigint() / 1000n);

function spinUs(us: number): void {
  const until = process.hrtime.bigint() + BigInt(Math.round(us * 1000));
  while (process.hrtime.bigint() < until);
}

/** Pins the calling thread to `cpus` (a taskset list). */
function pinThisThread(cpus: string): void {
  const tid = fs.readlinkSync('/proc/thread-self').split('/').pop() ?? '';
  execFileSync('taskset', ['-p', '-c', cpus, tid], { stdio: 'ignore' });
}

async function measure(
  mode: Mode,
  workUs: number,
  busyUs: number,
  count: number,
  pinned = false,
): Promise<number[]> {
  const shared = new SharedArrayBuffer(32);
  const seq = new Int32Array(shared, 0, 2);
  const began = new Float64Array(shared, 8, 1);
  const setup: Setup = { mode, workUs, shared, ...(pinned ? { cpu: 1 } : {}) };
  if (pinned) pinThisThread('0');
  const worker = new Worker(__filename, { workerData: setup });
  await new Promise((resolve) => worker.once('message', resolve));
  const delays: number[] = [];
  try {
    for (let i = 1; i <= count; i++) {
      await new Promise((resolve) => setTimeout(resolve, 1));
      const posted = nowUs();
      let answered: Promise<unknown>;
      if (mode === 'port') {
        answered = new Promise((resolve) => worker.once('message', resolve));
        worker.postMessage(i);
      } else {
        Atomics.store(seq, POSTED, i);
        Atomics.notify(seq, POSTED);
        const wait = atomics.waitAsync(seq, ANSWERED, i - 1);
        answered = wait.async ? wait.value : Promise.resolve();
      }
      spinUs(busyUs);
      const reply = await answered;
      const start = mode === 'port' ? (reply as number) : (began[0] ?? NaN);
      delays.push(start - posted);
    }
  } finally {
    await worker.terminate();
    if (pinned) pinThisThread(`0-${os.cpus().length - 1}`);
  }
  return delays;
}

function serve({ mode, workUs, shared, cpu }: Setup): void {
  const port = parentPort;
  if (!port) return;
  if (cpu !== undefined) pinThisThread(String(cpu));
  if (mode === 'port') {
    port.on('message', () => {
      const start = nowUs();
      spinUs(workUs);
      port.postMessage(start);
    });
    port.postMessage('ready');
    return;
  }
  const seq = new Int32Array(shared, 0, 2);
  const began = new Float64Array(shared, 8, 1);
  port.postMessage('ready');
  for (let seen = 0; ;) {
    Atomics.wait(seq, POSTED, seen);
    began[0] = nowUs();
    seen = Atomics.load(seq, POSTED);
    spinUs(workUs);
    Atomics.store(seq, ANSWERED, seen);
    Atomics.notify(seq, ANSWERED);
  }
}

function report(label: string, d: number[]): void {
  console.log(`  ${label}  ${percentile(d, 50).toFixed(0).padStart(5)} / ${percentile(d, 90).toFixed(0)}`);
}

async function main(count: number): Promise<void> {
  console.log(`count ${count}; µs from posting a job until the worker began it, p50 / p90`);
  const busy = (us: number): string => `main busy ${String(us).padStart(3)} µs after posting`;
  for (const workUs of [0, 450])
    for (const busyUs of [0, 100, 300])
      for (const mode of ['port', 'atomics'] as const) {
        const d = await measure(mode, workUs, busyUs, count);
        report(`${mode.padEnd(8)} worker works ${String(workUs).padStart(3)} µs, ${busy(busyUs)}`, d);
      }
  if (os.cpus().length < 2) return;
  for (const busyUs of [0, 100])
    report(
      `port     worker works 450 µs on CPU 1, main on CPU 0, ${busy(busyUs)}`,
      await measure('port', 450, busyUs, count, true),
    );
}

if (!isMainThread) serve(workerData as Setup);
else if (require.main === module) {
  main(Number(process.argv[2] ?? 500)).catch((err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
