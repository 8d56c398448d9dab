import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ApiClient } from '../../cli/api-client';
import { DaemonProcess } from '../support/daemon-process';
import { InProcessDaemon } from '../support/in-process-daemon';
import { NetnsSet } from '../support/netns';
import { RecordingBackend } from '../support/recording-backend';
import { cpuSince, processCpu } from './process-cpu';
import { percentile, ratePerSecond, timeMs } from './stats';
import { attachRequest } from '../support/attach-request';
import { WARM_OPS_DEFAULT, warmRounds } from './warm-up';

// The daemon as a runtime sees it: Attach/Detach through gRPC on the unix socket. With the recording
// backend it measures the core alone (validation, allocation, durable store writes, gRPC); with the
// Linux backend, the whole path into the kernel.

export interface DaemonBenchRow {
  name: string;
  op: 'attach' | 'detach';
  p50Ms: number;
  p99Ms: number;
  perSecondAtParallel: number;
  /** User + system CPU of the daemon process per operation over the rate run (daemon processes only). */
  cpuMsPerOp?: number;
  /** Its system part. */
  cpuSysMsPerOp?: number;
}

async function measure(
  client: ApiClient,
  name: string,
  netnsPaths: string[],
  count: number,
  parallel: number,
  /** The daemon's pid when it is a process of its own: its CPU per operation is then reported. */
  daemonPid: number | undefined,
  /** Untimed rounds of `count` attaches and detaches first (see warm-up.ts); 0 measures a fresh daemon. */
  rounds: number,
): Promise<DaemonBenchRow[]> {
  const at = (i: number): string => netnsPaths[i % netnsPaths.length] ?? '';
  for (let round = 0; round < rounds; round++) {
    await ratePerSecond(
      Array.from(
        { length: count },
        (_, i) => () => client.call(client.raw.attach, attachRequest(`warm-${i}`, at(i))),
      ),
      parallel,
    );
    await ratePerSecond(
      Array.from(
        { length: count },
        (_, i) => () => client.call(client.raw.detach, { workloadId: `warm-${i}`, netns: undefined }),
      ),
      parallel,
    );
  }
  const attachMs: number[] = [];
  const detachMs: number[] = [];
  for (let i = 0; i < count; i++)
    attachMs.push(await timeMs(() => client.call(client.raw.attach, attachRequest(`seq-${i}`, at(i)))));
  for (let i = 0; i < count; i++)
    detachMs.push(
      await timeMs(() => client.call(client.raw.detach, { workloadId: `seq-${i}`, netns: undefined })),
    );
  const withCpu = async (run: () => Promise<number>): Promise<{ rate: number; cpu?: [number, number] }> => {
    const before = daemonPid === undefined ? undefined : processCpu(daemonPid);
    const rate = await run();
    if (daemonPid === undefined || !before) return { rate };
    const used = cpuSince(daemonPid, before);
    return { rate, cpu: [used.totalMs / count, used.systemMs / count] };
  };
  const attachRate = await withCpu(() =>
    ratePerSecond(
      Array.from(
        { length: count },
        (_, i) => () => client.call(client.raw.attach, attachRequest(`par-${i}`, at(i))),
      ),
      parallel,
    ),
  );
  const detachRate = await withCpu(() =>
    ratePerSecond(
      Array.from(
        { length: count },
        (_, i) => () => client.call(client.raw.detach, { workloadId: `par-${i}`, netns: undefined }),
      ),
      parallel,
    ),
  );
  return [
    {
      name,
      op: 'attach',
      p50Ms: percentile(attachMs, 50),
      p99Ms: percentile(attachMs, 99),
      perSecondAtParallel: attachRate.rate,
      ...(attachRate.cpu ? { cpuMsPerOp: attachRate.cpu[0], cpuSysMsPerOp: attachRate.cpu[1] } : {}),
    },
    {
      name,
      op: 'detach',
      p50Ms: percentile(detachMs, 50),
      p99Ms: percentile(detachMs, 99),
      perSecondAtParallel: detachRate.rate,
      ...(detachRate.cpu ? { cpuMsPerOp: detachRate.cpu[0], cpuSysMsPerOp: detachRate.cpu[1] } : {}),
    },
  ];
}

export interface DaemonBenchOptions {
  count: number;
  parallel: number;
  /** Untimed attaches (see warm-up.ts): before the measurement, or between the two of the real daemon. */
  warmOps?: number;
}

/** Core + gRPC only: the recording backend programs nothing. All workloads share one namespace. */
export async function benchDaemonRecording(opts: DaemonBenchOptions): Promise<DaemonBenchRow[]> {
  const namespaces = new NetnsSet('wnb-');
  const d = await InProcessDaemon.start(new RecordingBackend(), { podCidrs: ['10.90.0.0/16'] });
  try {
    return await measure(
      d.client,
      'workloadnet daemon (recording backend)',
      [namespaces.add().path],
      opts.count,
      opts.parallel,
      undefined,
      warmRounds(opts.warmOps ?? WARM_OPS_DEFAULT, opts.count),
    );
  } finally {
    await d.stop();
    namespaces.cleanup();
  }
}

/** The name of the row measured on a fresh daemon, right after it started. */
export const FRESH_DAEMON_ROW = 'fresh daemon (linux backend)';

/**
 * The real daemon process with the Linux backend, inside a test-owned node namespace: measured twice,
 * right after it started (its first calls: the fresh row) and once it has settled (see warm-up.ts).
 */
export async function benchDaemonLinux(opts: DaemonBenchOptions): Promise<DaemonBenchRow[]> {
  const namespaces = new NetnsSet('wnb-');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-bench-'));
  const node = namespaces.add().name;
  execFileSync('ip', ['-n', node, 'link', 'set', 'lo', 'up']);
  const workloads = Array.from({ length: opts.count }, () => namespaces.add().path);
  const d = await DaemonProcess.start({
    dir,
    netns: node,
    args: ['--pod-cidr', '10.91.0.0/16', '--log-level', 'warn'],
  });
  try {
    const fresh = await measure(
      d.client,
      FRESH_DAEMON_ROW,
      workloads,
      opts.count,
      opts.parallel,
      d.child.pid,
      0,
    );
    const settled = await measure(
      d.client,
      'workloadnet daemon (linux backend)',
      workloads,
      opts.count,
      opts.parallel,
      d.child.pid,
      warmRounds(opts.warmOps ?? WARM_OPS_DEFAULT, opts.count),
    );
    return [...settled, ...fresh];
  } finally {
    await d.stop();
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
