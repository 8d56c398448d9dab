import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { AttachmentView } from '../../core/backend';
import { attachTo, type TestSpec } from '../support/attach-spec';
import { DpuBackend } from '../../backends/dpu';
import { encodeDetails } from '../../backends/dpu/details';
import { macForKey } from '../../backends/dpu/port-spec';
import { percentile } from './stats';
import { waitUntil } from '../support/wait-until';
import { columnRow, printRowsAndExit } from './bench-main';

// The DPU backend's own costs, with the simulator as the agent (zero latency, no dataplane): Attach
// latency through the whole protocol round trip, the time to resynchronise a large snapshot after the
// agent reconnects, and the memory both processes hold at that size.

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

const SIM_MAIN = path.resolve(__dirname, '../../backends/dpu-sim/main.js');

function attachSpec(i: number): TestSpec {
  const workloadId = `bench-${i}`;
  return {
    key: `${workloadId}/eth0`,
    workloadId,
    ifName: 'eth0',
    netnsPath: `/var/run/netns/bench-${i}`,
    netnsInode: 0,
    ips: [
      {
        family: 4,
        address: `10.${100 + Math.floor(i / 65536)}.${Math.floor(i / 256) % 256}.${i % 256}`,
        gateway: '169.254.1.1',
      },
    ],
    mtu: 1500,
  };
}

/** A stored attachment as the core would hand it back after a restart. */
function storedView(i: number): AttachmentView {
  const s = attachSpec(i);
  const mac = macForKey(s.key);
  return {
    ...s,
    dataplane: {
      ifName: s.ifName,
      mac,
      mtu: s.mtu,
      routes: [{ destination: '0.0.0.0/0', gateway: '169.254.1.1' }],
      details: encodeDetails({
        port: s.key,
        generation: i + 1,
        mac,
        endpoint: '',
        agentId: 'bench-dpu',
        bootId: 'old',
      }),
    },
  };
}

function startSim(socket: string, bootId: string): ChildProcess {
  return spawn(
    process.execPath,
    [
      SIM_MAIN,
      '--controller',
      `unix:${socket}`,
      '--agent-id',
      'bench-dpu',
      '--boot-id',
      bootId,
      '--log-level',
      process.env.DPU_BENCH_SIM_LOG ?? 'warn',
      '--backoff-max-ms',
      '200',
      // Room for the resync's ports: 3 PFs of 2,048 VFs (an inventory still within the 256 KiB limit).
      '--pfs',
      '3',
    ],
    {
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
}

async function stopSim(sim: ChildProcess): Promise<void> {
  if (sim.exitCode !== null) return;
  const exited = new Promise((r) => sim.once('exit', r));
  sim.kill('SIGTERM');
  await exited;
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m?.[1] ? Number(m[1]) / 1024 : NaN;
}

/** Polls often: some waits sit inside a measured interval. */
const until = (pred: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> =>
  waitUntil(pred, `bench: ${what}`, timeoutMs, { intervalMs: 5 });

export async function benchDpu(opts: { count: number; ports: number }): Promise<BenchResult[]> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnd-bench-'));
  const out: BenchResult[] = [];
  const sims: ChildProcess[] = [];
  const backends: DpuBackend[] = [];
  try {
    // 1. Attach/Detach latency: one port at a time, full round trip to the agent process.
    const b1 = new DpuBackend({ agentSocket: path.join(dir, 'a.sock') });
    backends.push(b1);
    await b1.start();
    await b1.reconcile([]);
    const sim1 = startSim(path.join(dir, 'a.sock'), 'bench-1');
    sims.push(sim1);
    await until(async () => (await b1.health()).ready, 'the agent', 10_000);
    for (let i = 0; i < 20; i++)
      await b1.detach({
        ...attachSpec(1_000_000 + i),
        dataplane: await attachTo(b1, attachSpec(1_000_000 + i)),
      });
    const attachMs: number[] = [];
    const detachMs: number[] = [];
    for (let i = 0; i < opts.count; i++) {
      const s = attachSpec(i);
      let t = process.hrtime.bigint();
      const dp = await attachTo(b1, s);
      attachMs.push(Number(process.hrtime.bigint() - t) / 1e6);
      t = process.hrtime.bigint();
      await b1.detach({ ...s, dataplane: dp });
      detachMs.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
    out.push({ name: 'dpu attach p50', value: percentile(attachMs, 50), unit: 'ms' });
    out.push({ name: 'dpu attach p99', value: percentile(attachMs, 99), unit: 'ms' });
    out.push({ name: 'dpu detach p50', value: percentile(detachMs, 50), unit: 'ms' });
    await stopSim(sim1);
    await b1.stop();

    // 2. Resync: a daemon restarted with `ports` stored attachments, then a fresh agent (new boot id,
    //    empty tables) connects and must receive and ack them all.
    const b2 = new DpuBackend({ agentSocket: path.join(dir, 'b.sock'), logger: undefined });
    backends.push(b2);
    await b2.start();
    const views = Array.from({ length: opts.ports }, (_, i) => storedView(i));
    const tReconcile = process.hrtime.bigint();
    await b2.reconcile(views);
    out.push({
      name: `dpu reconcile (${opts.ports} ports, no agent)`,
      value: Number(process.hrtime.bigint() - tReconcile) / 1e6,
      unit: 'ms',
    });
    const sim2 = startSim(path.join(dir, 'b.sock'), 'bench-2');
    sims.push(sim2);
    await until(async () => (await b2.health()).details?.synced === true, 'the snapshot to be acked', 60_000);
    const h = await b2.health();
    out.push({
      name: `dpu snapshot resync (${opts.ports} ports)`,
      value: Number(h.details?.lastSyncMs),
      unit: 'ms',
    });

    // Reconnect of the same agent process: the stream drops, the agent dials again, resync again.
    const firstSession = h.details?.sessionId;
    const tRe = Date.now();
    sim2.kill('SIGSTOP');
    await until(
      async () => (await b2.health()).details?.sessionId === undefined,
      'the stalled session to be dropped',
      10_000,
    );
    sim2.kill('SIGCONT');
    await until(
      async () => {
        const x = await b2.health();
        return x.details?.synced === true && x.details?.sessionId !== firstSession;
      },
      'the second resync',
      60_000,
    );
    out.push({
      name: `dpu resync after a stall, incl. detection (${opts.ports} ports)`,
      value: Date.now() - tRe,
      unit: 'ms',
    });
    out.push({
      name: `dpu snapshot resync, second (${opts.ports} ports)`,
      value: Number((await b2.health()).details?.lastSyncMs),
      unit: 'ms',
    });

    if (global.gc) global.gc();
    out.push({ name: `dpu daemon RSS (${opts.ports} ports)`, value: rssMiB(process.pid), unit: 'MiB' });
    if (sim2.pid)
      out.push({ name: `dpu simulator RSS (${opts.ports} ports)`, value: rssMiB(sim2.pid), unit: 'MiB' });
    return out;
  } finally {
    for (const s of sims) await stopSim(s);
    for (const b of backends) await b.stop().catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  const count = Number(process.argv[2] ?? 1000);
  const ports = Number(process.argv[3] ?? 5000);
  printRowsAndExit(benchDpu({ count, ports }), columnRow);
}
