import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DpuBackend } from '../../backends/dpu';
import { attachTo, type TestSpec } from '../support/attach-spec';
import { NetnsSet } from '../support/netns';
import { waitUntil } from '../support/wait-until';
import { SimProcess } from '../support/sim-process';
import { percentile } from './stats';
import { columnRow, printRowsAndExit } from './bench-main';

// The DPU fleet's costs: Attach with the netns dataplane on (the simulator plumbs a veth pair and
// routes in its DPU namespace, the daemon moves the VF into the workload and addresses it), and Attach
// with two agents serving one backend (placement among them). Needs root for the namespaces.

export interface BenchResult {
  name: string;
  value: number;
  unit: string;
}

function spec(i: number, netns: { path: string }): TestSpec {
  const workloadId = `fleet-${i}`;
  return {
    key: `${workloadId}/eth0`,
    workloadId,
    ifName: 'eth0',
    netnsPath: netns.path,
    netnsInode: fs.statSync(netns.path).ino,
    ips: [
      {
        family: 4,
        address: `10.${110 + Math.floor(i / 65536)}.${Math.floor(i / 256) % 256}.${(i % 250) + 2}`,
        gateway: '169.254.1.1',
      },
    ],
    mtu: 1500,
  };
}

async function attachDetachMs(
  backend: DpuBackend,
  count: number,
  netns: { path: string },
  warmup = 20,
): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < warmup + count; i++) {
    const s = spec(i, netns);
    const t = process.hrtime.bigint();
    const dp = await attachTo(backend, s);
    if (i >= warmup) ms.push(Number(process.hrtime.bigint() - t) / 1e6);
    await backend.detach({ ...s, dataplane: dp });
  }
  return ms;
}

export async function benchDpuFleet(opts: { count: number }): Promise<BenchResult[]> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fleet-bench-'));
  const nets = new NetnsSet('wn-fleet-bench-');
  const sims: SimProcess[] = [];
  const backends: DpuBackend[] = [];
  const out: BenchResult[] = [];
  try {
    const node = nets.add();
    const workload = nets.add();
    const dpus = [nets.add(), nets.add()];
    for (const d of dpus) execFileSync('ip', ['-n', d.name, 'link', 'set', 'lo', 'up']);

    // 1. One agent, netns dataplane.
    const b1 = new DpuBackend({ agentSocket: path.join(dir, 'a.sock'), hostNetnsPath: node.path });
    backends.push(b1);
    await b1.start();
    await b1.reconcile([]);
    const netnsSim = (socket: string, agentId: string, d: { name: string }): SimProcess =>
      SimProcess.start({
        socket,
        agentId,
        stateFile: path.join(dir, `${agentId}.json`),
        extra: [
          '--dataplane',
          'netns',
          '--dpu-netns',
          d.name,
          '--host-netns',
          node.path,
          '--log-level',
          'warn',
        ],
      });
    sims.push(netnsSim(path.join(dir, 'a.sock'), 'bench-netns', dpus[0]!));
    await waitUntil(async () => (await b1.health()).ready, 'bench: the agent', 10_000);
    const netnsMs = await attachDetachMs(b1, opts.count, workload);
    out.push({ name: 'dpu attach p50, netns dataplane', value: percentile(netnsMs, 50), unit: 'ms' });
    out.push({ name: 'dpu attach p99, netns dataplane', value: percentile(netnsMs, 99), unit: 'ms' });
    for (const s of sims.splice(0)) await s.stop();
    await b1.stop();

    // 2. Two agents, netns dataplane: each attach is placed on the emptier one.
    const b2 = new DpuBackend({ agentSocket: path.join(dir, 'b.sock'), hostNetnsPath: node.path });
    backends.push(b2);
    await b2.start();
    await b2.reconcile([]);
    sims.push(netnsSim(path.join(dir, 'b.sock'), 'bench-a', dpus[0]!));
    sims.push(netnsSim(path.join(dir, 'b.sock'), 'bench-b', dpus[1]!));
    await waitUntil(
      async () => (await b2.health()).details?.agentsHealthy === 2,
      'bench: two agents',
      10_000,
    );
    const twoMs = await attachDetachMs(b2, opts.count, workload);
    out.push({
      name: 'dpu attach p50, two agents, netns dataplane',
      value: percentile(twoMs, 50),
      unit: 'ms',
    });
    out.push({
      name: 'dpu attach p99, two agents, netns dataplane',
      value: percentile(twoMs, 99),
      unit: 'ms',
    });
    return out;
  } finally {
    for (const s of sims) await s.stop();
    for (const b of backends) await b.stop().catch(() => undefined);
    nets.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  printRowsAndExit(benchDpuFleet({ count: Number(process.argv[2] ?? 500) }), columnRow);
}
