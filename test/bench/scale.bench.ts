import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { SIM_MAIN } from '../support/sim-process';
import { attachRequest } from '../support/attach-request';
import { outcome } from '../support/grpc-outcome';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { NetnsSet } from '../support/netns';
import { cpuSince, processCpu } from './process-cpu';
import { percentile, timeMs } from './stats';

// Scale: the real daemon holding 10,000 attachments (DPU backend with the simulator and its dataplane
// off, so the kernel's veth costs do not dominate): daemon memory, Status and List latency, and the time
// a restart takes until Status is ready again (store load + reconcile + agent resync).
//
// Memory is reported three ways, because they answer different questions: RSS while holding the
// attachments and idle (what the daemon costs a node day to day), RSS right after five Lists of all of
// them (each List reads and encodes every attachment, and the garbage it leaves is collected lazily),
// and the peak (VmHWM) over the daemon's life up to then, which is what a memory limit must
// allow for.

/** Pause between the fill and the idle reading, so in-flight work and its buffers have settled. */
const SETTLE_MS = 2000;

export interface ScaleResult {
  name: string;
  value: number;
  unit: string;
}

/** A memory figure of /proc/<pid>/status in MiB: VmRSS (resident now) or VmHWM (resident at most). */
function statusMiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const line = fs
    .readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  return Number(line?.split(/\s+/)[1] ?? NaN) / 1024;
}

/** With the GC hook preloaded ($WN_GC_HOOK_DIR): /proc's split of RSS, and V8's own figures. */
async function memoryBreakdown(pid: number, when: string): Promise<void> {
  const dir = process.env.WN_GC_HOOK_DIR;
  if (!dir) return;
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = status.split('\n').filter((l) => /^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM|Threads)/.test(l));
  console.error(`scale: ${when}: ${rss.map((l) => l.replace(/\s+/g, ' ')).join(', ')}`);
  const before = new Set(fs.readdirSync(dir));
  process.kill(pid, 'SIGUSR2');
  for (;;) {
    await new Promise((r) => setTimeout(r, 200));
    const f = fs.readdirSync(dir).find((x) => !before.has(x) && x.startsWith('memory-'));
    if (f) {
      await new Promise((r) => setTimeout(r, 200));
      console.error(`scale: ${when}: ${fs.readFileSync(path.join(dir, f), 'utf8').replace(/\s+/g, ' ')}`);
      return;
    }
  }
}

/** Every attachment through ListStream, counted, not kept. */
function streamAll(d: DaemonProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    let n = 0;
    const s = d.client.raw.listStream({});
    s.on('data', () => n++);
    s.on('error', reject);
    s.on('end', () => resolve(n));
  });
}

/**
 * The peak RSS (VmHWM) of the CLI `cli` running `workloadnet <args>`, its output thrown away: read
 * every 10 ms until it exits, so a peak in its last few milliseconds may be missed.
 */
async function cliPeakMiB(cli: string, args: string[]): Promise<number> {
  const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
  let exit: number | null | undefined;
  const exited = new Promise<void>((resolve) =>
    child.on('exit', (code) => {
      exit = code;
      resolve();
    }),
  );
  let peak = NaN;
  while (exit === undefined) {
    try {
      const hwm = statusMiB(child.pid ?? 0, 'VmHWM');
      if (Number.isFinite(hwm)) peak = hwm;
    } catch {
      // Gone between the check and the read.
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  await exited;
  if (exit !== 0) throw new Error(`workloadnet ${args.join(' ')} exited ${exit}`);
  return peak;
}

export async function benchScale(opts: {
  attachments: number;
  parallel: number;
  /**
   * dpu (default): the simulator, dataplane off, one workload namespace. linux: real veths, the daemon
   * in a node namespace of its own and a workload namespace per attachment (slow to fill: run it with
   * a few thousand and read the per-attachment figure).
   */
  backend?: 'dpu' | 'linux';
}): Promise<ScaleResult[]> {
  const linux = opts.backend === 'linux';
  const namespaces = new NetnsSet('wnb-');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-scale-'));
  const agentSocket = path.join(dir, 'agent.sock');
  const args = [
    ...(linux ? ['--backend', 'linux'] : ['--backend', 'dpu', '--agent-socket', agentSocket]),
    '--pod-cidr',
    '10.128.0.0/14',
    '--log-level',
    'warn',
  ];
  const node = linux ? namespaces.addNode('10.250.0.1').name : undefined;
  const workloads = linux ? namespaces.addMany(opts.attachments).map((n) => n.path) : [namespaces.add().path];
  // A simulated DPU offers 4,096 VFs (2 PFs of 2,048, like a large real card): the node holds its
  // attachments on as many DPUs as it takes, placed by free VFs.
  const simCount = linux ? 0 : Math.max(1, Math.ceil(opts.attachments / 4000));
  const sims = Array.from({ length: simCount }, (_, i) =>
    spawn(
      process.execPath,
      [
        SIM_MAIN,
        '--controller',
        `unix:${agentSocket}`,
        '--agent-id',
        `scale-${i}`,
        '--backoff-max-ms',
        '100',
        '--log-level',
        'warn',
      ],
      { stdio: 'ignore' },
    ),
  );
  const cleanUp = (): void => {
    for (const sim of sims) sim.kill('SIGTERM');
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  // A daemon that does not start must not leave the simulators dialling it.
  let d = await DaemonProcess.start({ dir, args, netns: node }).catch((err: unknown) => {
    cleanUp();
    throw err;
  });
  try {
    // Ready, and every DPU connected: placement must see them all before the fill starts.
    const ready = async (): Promise<void> => {
      for (;;) {
        const st = await d.client.status();
        if (st.ready && st.dpus.filter((a) => a.healthy).length === sims.length) return;
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    await ready();
    let next = 0;
    let done = 0;
    let unavailable = 0;
    const pid = d.child.pid ?? 0;
    // Memory along the fill, on stderr: a long Linux fill that cannot finish still says what it held.
    const progress = (): void => {
      if (++done % 1000 === 0)
        console.error(
          `scale: ${done} attached: RSS ${statusMiB(pid, 'VmRSS').toFixed(1)} MiB, peak ${statusMiB(pid, 'VmHWM').toFixed(1)} MiB (${new Date().toISOString()})`,
        );
    };
    const worker = async (): Promise<void> => {
      while (next < opts.attachments) {
        const i = next++;
        for (;;) {
          const r = await outcome(
            d.client.call(
              d.client.raw.attach,
              attachRequest(`scale-${i}`, workloads[i % workloads.length] ?? ''),
            ),
          );
          if (r.code === grpc.status.OK) {
            progress();
            break;
          }
          // On a loaded machine a simulated agent may miss its heartbeats for a moment: the daemon
          // says UNAVAILABLE ("retry once the agent is back"), and a client does just that.
          if (r.code !== grpc.status.UNAVAILABLE) throw new Error(`attach scale-${i}: ${r.details}`);
          unavailable++;
          await new Promise((res) => setTimeout(res, 100));
        }
      }
    };
    const fillCpu = processCpu(pid);
    const fillMs = await timeMs(() => Promise.all(Array.from({ length: opts.parallel }, worker)));
    const fillCpuMs = cpuSince(pid, fillCpu).totalMs;
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const idleRss = statusMiB(pid, 'VmRSS');
    await memoryBreakdown(pid, 'idle');
    const status: number[] = [];
    const list: number[] = [];
    for (let i = 0; i < 20; i++) status.push(await timeMs(() => d.client.status()));
    const listCpu = processCpu(pid);
    for (let i = 0; i < 5; i++) list.push(await timeMs(() => d.client.call(d.client.raw.list, {})));
    const listCpuMs = cpuSince(pid, listCpu).totalMs / 5;
    const afterListRss = statusMiB(pid, 'VmRSS');
    const peakRss = statusMiB(pid, 'VmHWM');
    const stream: number[] = [];
    // A daemon older than ListStream (an A/B run) answers UNIMPLEMENTED: its rows read NaN.
    for (let i = 0; i < 5; i++) stream.push(await timeMs(() => streamAll(d)).catch(() => NaN));
    const afterStreamRss = statusMiB(pid, 'VmRSS');
    const peakAfterStream = statusMiB(pid, 'VmHWM');
    // The operator's side of a List: `workloadnet ls` prints as ListStream sends. $WN_SCALE_OLD_CLI
    // names another build's dist/cli/workloadnet.js to compare (e.g. one from before ListStream).
    const clis: Array<[string, string]> = [['', CLI]];
    if (process.env.WN_SCALE_OLD_CLI) clis.push([' (WN_SCALE_OLD_CLI)', process.env.WN_SCALE_OLD_CLI]);
    const cliRows: ScaleResult[] = [];
    for (const [which, cli] of clis)
      for (const json of [true, false]) {
        const args = ['ls', ...(json ? ['--json'] : []), '--socket', d.socket, '--timeout', '120'];
        cliRows.push({
          name: `workloadnet ls${json ? ' --json' : ''} of all${which}: the CLI's peak RSS`,
          value: await cliPeakMiB(cli, args),
          unit: 'MiB',
        });
      }
    await memoryBreakdown(pid, 'after Lists');
    if (process.env.WN_GC_HOOK_DIR) {
      fs.writeFileSync(path.join(process.env.WN_GC_HOOK_DIR, 'snapshot'), '');
      process.kill(pid, 'SIGUSR2');
      while (fs.existsSync(path.join(process.env.WN_GC_HOOK_DIR, 'snapshot')))
        await new Promise((r) => setTimeout(r, 200));
      await d.client.status();
    }
    await d.stop();
    const restart = await timeMs(async () => {
      d = await DaemonProcess.start({ dir, args, netns: node });
      await ready();
    });
    const held = (await d.client.status()).attachments;
    return [
      { name: `attachments held after restart (of ${opts.attachments})`, value: held, unit: '' },
      { name: 'attaches retried during the fill (agent away: UNAVAILABLE)', value: unavailable, unit: '' },
      {
        name: `fill rate, ${opts.parallel} in flight`,
        value: opts.attachments / (fillMs / 1000),
        unit: 'attaches/s',
      },
      // CPU, not time: what the daemon spent, which a machine busy with other work moves less.
      {
        name: 'daemon CPU per attach during the fill',
        value: (fillCpuMs * 1000) / opts.attachments,
        unit: 'µs',
      },
      { name: `daemon CPU per List of ${opts.attachments}`, value: listCpuMs, unit: 'ms' },
      { name: `daemon RSS holding ${opts.attachments}, idle after the fill`, value: idleRss, unit: 'MiB' },
      {
        name: `daemon RSS holding ${opts.attachments}, right after 5 Lists of all`,
        value: afterListRss,
        unit: 'MiB',
      },
      { name: 'daemon peak RSS (VmHWM) through the fill and the Lists', value: peakRss, unit: 'MiB' },
      {
        name: `daemon RSS holding ${opts.attachments}, right after 5 ListStreams of all`,
        value: afterStreamRss,
        unit: 'MiB',
      },
      { name: 'daemon peak RSS (VmHWM) through the ListStreams too', value: peakAfterStream, unit: 'MiB' },
      ...cliRows,
      { name: 'Status p50', value: percentile(status, 50), unit: 'ms' },
      { name: `List p50 (${opts.attachments} attachments)`, value: percentile(list, 50), unit: 'ms' },
      { name: `ListStream p50 (${opts.attachments} attachments)`, value: percentile(stream, 50), unit: 'ms' },
      { name: 'restart until ready (store load + reconcile + agent resync)', value: restart, unit: 'ms' },
    ];
  } finally {
    await d.stop().catch(() => undefined);
    cleanUp();
  }
}

if (require.main === module) {
  const attachments = Number(process.argv[2] ?? 10_000);
  const backend = process.argv[3] === 'linux' ? 'linux' : 'dpu';
  benchScale({ attachments, parallel: 32, backend }).then(
    (rows) => {
      for (const r of rows) console.log(`${r.name}: ${r.value.toFixed(1)} ${r.unit}`);
      process.exit(0);
    },
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
