import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { addNetns, deleteNetns, netnsPath } from '../e2e/support/netns';
import { REFERENCE_PLUGIN_DIR, referencePluginConfig } from '../e2e/support/reference-plugins';
import { runPluginCalls, type PhaseResult } from './cni-exec-runner';
import { cpuSince, processCpu } from './process-cpu';
import { percentile } from './stats';
import type { OpRow } from './op-row';
import { warmRounds } from './warm-up';

// The baseline workloadnet is measured against: Debian's reference CNI plugins (ptp or bridge, with
// host-local IPAM) executed exactly as a runtime executes them. The plugin process is started by a small
// native runner (cni-exec.c: posix_spawn, as Go's os/exec does) that runs in a test-owned node
// namespace, with the CNI environment and the conflist entry on stdin, for workload namespaces created
// beforehand and not timed. The same runner executes workloadnet's forwarder.

export interface ReferenceCniBenchOptions {
  plugin: 'ptp' | 'bridge';
  /** Workloads per phase. */
  count: number;
  /** Operations in flight during the rate phase. */
  parallel: number;
}

/**
 * A plugin's row (ADD is attach, DEL detach). Its CPU: the plugin processes and the children they
 * waited for (host-local), plus the process named by `serverPid` (the daemon behind a forwarder).
 */
export type ReferenceCniResult = OpRow;

const CNI_VERSION = '1.0.0';
const NETWORK_NAME = 'wne-bench';
const SUBNET = '10.253.0.0/16';
/** What containerd gives plugins (on top of the CNI_ variables): a clean PATH. */
const PLUGIN_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };

interface Workload {
  containerId: string;
  netns: string;
  podName: string;
  podUid: string;
  /** The ADD result, passed back as prevResult on DEL as libcni does. */
  prevResult?: unknown;
}

/**
 * Measures ADD and DEL of the reference plugin: first one workload at a time (p50/p99 over `count`),
 * then all `count` again with `parallel` in flight (rate). Everything it creates — node namespace,
 * workload namespaces, host-local state — is removed afterwards, also on failure.
 */
export async function benchReferenceCni(opts: ReferenceCniBenchOptions): Promise<ReferenceCniResult[]> {
  const work = await mkdtemp(path.join(os.tmpdir(), 'wne-bench-cni-'));
  try {
    const pluginConfig = referencePluginConfig({
      name: NETWORK_NAME,
      plugin: opts.plugin,
      bridge: 'wne-bbr0',
      subnet: SUBNET,
      dataDir: path.join(work, 'ipam'),
    });
    return await benchCniPlugin({
      name: `${opts.plugin}+host-local`,
      binary: path.join(REFERENCE_PLUGIN_DIR, opts.plugin),
      pluginConfig,
      count: opts.count,
      parallel: opts.parallel,
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

export interface CniPluginBenchOptions {
  /** Row label. */
  name: string;
  /** The plugin executable, run exactly as libcni runs it. */
  binary: string;
  /** The conflist entry (without cniVersion and name, which are added). */
  pluginConfig: Record<string, unknown>;
  count: number;
  parallel: number;
  /** An existing node namespace (name) to run the plugin in; a throwaway one is made otherwise. */
  nodeNetns?: string;
  /** A long-running process the plugin talks to (the daemon): its CPU counts too. */
  serverPid?: number;
  /** With a server: untimed ADDs (and DELs) first, so that it has settled (see warm-up.ts). */
  warmOps?: number;
}

/**
 * Measures ADD and DEL of any CNI plugin: first one workload at a time (p50/p99 over `count`), then all
 * `count` again with `parallel` in flight (rate). The namespaces it creates are removed afterwards,
 * also on failure.
 */
export async function benchCniPlugin(opts: CniPluginBenchOptions): Promise<ReferenceCniResult[]> {
  if (opts.count < 1 || opts.parallel < 1) throw new Error('count and parallel must be at least 1');
  const tag = randomBytes(3).toString('hex');
  const nodeNetns = opts.nodeNetns ?? `wne-bn-${tag}`;
  const workloadNames = Array.from({ length: opts.count }, (_, i) => `wne-bw-${tag}-${i}`);
  const created: string[] = [];
  try {
    if (!opts.nodeNetns) {
      await addNetns(nodeNetns);
      created.push(nodeNetns);
    }
    for (const name of workloadNames) {
      await addNetns(name);
      created.push(name);
    }
    const config = JSON.stringify({ cniVersion: CNI_VERSION, name: NETWORK_NAME, ...opts.pluginConfig });
    const workloads: Workload[] = workloadNames.map((name, i) => ({
      containerId: `${tag}${i.toString().padStart(6, '0')}`,
      netns: netnsPath(name),
      podName: `bench-${i}`,
      podUid: randomUUID(),
    }));
    const cni = new CniInvoker(opts.binary, netnsPath(nodeNetns), config);

    // Warm-up, not timed: page cache for the binaries, and for the daemon its JIT (a long-running
    // process serves pod events with optimised code; it takes thousands of calls: see warm-up.ts).
    // One round without warmOps (warmRounds gives at least one).
    for (let round = 0; round < warmRounds(opts.warmOps ?? 0, workloads.length); round++) {
      await cni.add(workloads, opts.parallel);
      await cni.del(workloads, opts.parallel);
    }
    const addMs = (await cni.add(workloads, 1)).calls.map((c) => c.ms);
    const delMs = (await cni.del(workloads, 1)).calls.map((c) => c.ms);
    const rateRun = async (
      run: () => Promise<PhaseResult>,
    ): Promise<{ perSecond: number; cpuMsPerOp: number; cpuSysMsPerOp: number }> => {
      const server = opts.serverPid === undefined ? undefined : processCpu(opts.serverPid);
      const phase = await run();
      const extra =
        opts.serverPid === undefined || !server
          ? { totalMs: 0, systemMs: 0 }
          : cpuSince(opts.serverPid, server);
      return {
        perSecond: workloads.length / (phase.totalMs / 1000),
        cpuMsPerOp: (phase.cpuMs + extra.totalMs) / workloads.length,
        cpuSysMsPerOp: (phase.sysMs + extra.systemMs) / workloads.length,
      };
    };
    const addRate = await rateRun(() => cni.add(workloads, opts.parallel));
    const delRate = await rateRun(() => cni.del(workloads, opts.parallel));

    return [
      {
        name: opts.name,
        op: 'attach',
        p50Ms: percentile(addMs, 50),
        p99Ms: percentile(addMs, 99),
        perSecondAtParallel: addRate.perSecond,
        cpuMsPerOp: addRate.cpuMsPerOp,
        cpuSysMsPerOp: addRate.cpuSysMsPerOp,
      },
      {
        name: opts.name,
        op: 'detach',
        p50Ms: percentile(delMs, 50),
        p99Ms: percentile(delMs, 99),
        perSecondAtParallel: delRate.perSecond,
        cpuMsPerOp: delRate.cpuMsPerOp,
        cpuSysMsPerOp: delRate.cpuSysMsPerOp,
      },
    ];
  } finally {
    // Deleting the namespaces takes every veth and the bridge with them, even after a failed DEL.
    for (const name of created.reverse()) await deleteNetns(name).catch(() => undefined);
  }
}

/** Executes one plugin the way libcni does, from inside the node namespace (through cni-exec). */
class CniInvoker {
  constructor(
    private readonly binary: string,
    private readonly nodeNetnsPath: string,
    private readonly config: string,
  ) {}

  /** ADD for every workload, `parallel` at a time; keeps each result for its DEL. */
  async add(workloads: Workload[], parallel: number): Promise<PhaseResult> {
    const phase = await runPluginCalls(
      this.binary,
      this.nodeNetnsPath,
      workloads.map((w) => ({ env: this.env('ADD', w), stdin: this.config })),
      parallel,
    );
    phase.calls.forEach((c, i) => {
      const w = workloads[i];
      if (w) w.prevResult = JSON.parse(c.stdout) as unknown;
    });
    return phase;
  }

  /** DEL for every workload with its ADD result as prevResult, as libcni sends it. */
  async del(workloads: Workload[], parallel: number): Promise<PhaseResult> {
    const base = JSON.parse(this.config) as object;
    const phase = await runPluginCalls(
      this.binary,
      this.nodeNetnsPath,
      workloads.map((w) => ({
        env: this.env('DEL', w),
        stdin:
          w.prevResult === undefined ? this.config : JSON.stringify({ ...base, prevResult: w.prevResult }),
      })),
      parallel,
    );
    for (const w of workloads) w.prevResult = undefined;
    return phase;
  }

  private env(command: 'ADD' | 'DEL', w: Workload): Record<string, string> {
    return {
      ...PLUGIN_ENV,
      CNI_COMMAND: command,
      CNI_CONTAINERID: w.containerId,
      CNI_NETNS: w.netns,
      CNI_IFNAME: 'eth0',
      CNI_PATH: REFERENCE_PLUGIN_DIR,
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${w.podName};K8S_POD_INFRA_CONTAINER_ID=${w.containerId};K8S_POD_UID=${w.podUid}`,
    };
  }
}

if (require.main === module) {
  const count = Number(process.argv[2] ?? 100);
  const parallel = Number(process.argv[3] ?? 16);
  void (async () => {
    for (const plugin of ['ptp', 'bridge'] as const) {
      for (const row of await benchReferenceCni({ plugin, count, parallel })) {
        console.log(
          `${row.name.padEnd(18)} ${row.op.padEnd(7)} p50 ${row.p50Ms.toFixed(1)} ms  p99 ${row.p99Ms.toFixed(1)} ms  ` +
            `${row.perSecondAtParallel.toFixed(0)}/s at ${parallel} parallel (count ${count})`,
        );
      }
    }
  })().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
