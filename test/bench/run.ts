// `npm run bench`: workloadnet side by side with Debian's reference CNI plugins, in one run on one
// machine, reported as medians and ratios (the machines are noisy; absolute numbers travel badly).
//
//   npm run bench -- [--count N] [--parallel N] [--pods N] [--scale N] [--only a,b] [--json FILE] [--svg FILE]
//   node dist/test/bench/run.js --from-json FILE --svg FILE     (re-render the chart only)
//
// Sections: dataplane (attach/detach through ptp, bridge, the Linux backend and the daemon), cni (the
// forwarder per call), containerd (whole pods), core (gRPC round trip, allocator), dpu, scale (10,000
// attachments held: memory, Status/List latency, restart time).
// The in-process Linux backend gets the same threadpool as the daemon.
import '../../cli/threadpool';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { benchAllocator } from './allocator.bench';
import { renderChart, type ChartPanel } from './chart';
import { benchCniShim } from './cni-shim.bench';
import { benchContainerdWithReferenceBridge, type ContainerdPodResult } from './containerd.bench';
import { benchDaemonLinux, benchDaemonRecording } from './daemon.bench';
import { benchDpu } from './dpu.bench';
import { benchLinuxBackend } from './linux-backend.bench';
import { benchReferenceCni } from './reference-cni';
import { benchScale } from './scale.bench';
import { benchWorkloadnetCni, benchWorkloadnetContainerd } from './workloadnet-cni.bench';

interface LatencyRow {
  name: string;
  op: 'attach' | 'detach';
  p50Ms: number;
  p99Ms: number;
  perSecondAtParallel: number;
  maxEventLoopDelayMs?: number;
}

interface Report {
  at: string;
  machine: { cpus: number; model: string; node: string; kernel: string };
  params: { count: number; parallel: number; pods: number };
  dataplane: LatencyRow[];
  cni: LatencyRow[];
  cniForwarder: Array<{ name: string; p50Ms: number; p99Ms: number }>;
  containerd: ContainerdPodResult[];
  core: LatencyRow[];
  allocator: Array<{ name: string; value: number; unit: string }>;
  dpu: Array<{ name: string; value: number; unit: string }>;
  scale?: Array<{ name: string; value: number; unit: string }>;
  ratios: Record<string, number>;
  /** Largest event-loop delay seen in this (benchmark) process during the dataplane section. */
  benchLoopMaxDelayMs?: number;
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const find = (rows: LatencyRow[], name: string, op: 'attach' | 'detach'): LatencyRow | undefined =>
  rows.find((r) => r.name.startsWith(name) && r.op === op);

function ratios(r: Report): Record<string, number> {
  const out: Record<string, number> = {};
  const ptpA = find([...r.dataplane, ...r.cni], 'ptp', 'attach');
  const ptpD = find([...r.dataplane, ...r.cni], 'ptp', 'detach');
  for (const [label, name] of [
    ['daemon', 'workloadnet daemon (linux'],
    ['backend', 'linux backend'],
    ['cni', 'workloadnet-cni'],
  ] as const) {
    const a = find([...r.dataplane, ...r.cni], name, 'attach');
    const d = find([...r.dataplane, ...r.cni], name, 'detach');
    if (ptpA && a) {
      out[`ptp/${label} attach p50`] = ptpA.p50Ms / a.p50Ms;
      out[`${label}/ptp attach rate@${r.params.parallel}`] = a.perSecondAtParallel / ptpA.perSecondAtParallel;
    }
    if (ptpD && d) {
      out[`ptp/${label} detach p50`] = ptpD.p50Ms / d.p50Ms;
      out[`${label}/ptp detach rate@${r.params.parallel}`] = d.perSecondAtParallel / ptpD.perSecondAtParallel;
    }
  }
  const bridge = r.containerd.find((c) => c.name.includes('bridge'));
  const ours = r.containerd.find((c) => c.name.includes('workloadnet'));
  if (bridge && ours) out['containerd bridge/workloadnet pod p50'] = bridge.p50Ms / ours.p50Ms;
  return out;
}

function print(r: Report): void {
  const line = (cells: string[], widths: number[]): string =>
    cells.map((c, i) => c.padEnd(widths[i] ?? 10)).join('  ');
  const w = [38, 7, 10, 10, 12];
  console.log(
    `\nworkloadnet benchmarks ${r.at} on ${r.machine.cpus}x ${r.machine.model}, node ${r.machine.node}, kernel ${r.machine.kernel}`,
  );
  console.log(`count ${r.params.count}, ${r.params.parallel} in flight for rates, ${r.params.pods} pods\n`);
  console.log(line(['dataplane / CNI', 'op', 'p50 ms', 'p99 ms', `/s @${r.params.parallel}`], w));
  for (const row of [...r.dataplane, ...r.cni, ...r.core]) {
    console.log(
      line(
        [row.name, row.op, row.p50Ms.toFixed(2), row.p99Ms.toFixed(2), row.perSecondAtParallel.toFixed(0)],
        w,
      ),
    );
  }
  for (const f of r.cniForwarder)
    console.log(line([f.name, '', f.p50Ms.toFixed(2), f.p99Ms.toFixed(2), ''], [60, 0, 10, 10, 0]));
  for (const c of r.containerd)
    console.log(
      line(
        [`${c.name} (pod run+stop+remove)`, '', c.p50Ms.toFixed(1), c.p99Ms.toFixed(1), ''],
        [60, 0, 10, 10, 0],
      ),
    );
  for (const a of [...r.allocator, ...r.dpu, ...(r.scale ?? [])])
    console.log(`${a.name}: ${a.value.toFixed(2)} ${a.unit}`);
  const maxLoop = Math.max(...r.dataplane.map((d) => d.maxEventLoopDelayMs ?? 0));
  if (maxLoop > 0) console.log(`largest event-loop delay in the linux backend run: ${maxLoop.toFixed(1)} ms`);
  console.log('\nratios (higher is better for workloadnet):');
  for (const [k, v] of Object.entries(r.ratios)) console.log(`  ${k}: ${v.toFixed(1)}x`);
}

function chart(r: Report): string {
  const rows = [...r.dataplane, ...r.cni];
  const bars = (op: 'attach' | 'detach', key: 'p50Ms' | 'perSecondAtParallel') =>
    rows
      .filter((x) => x.op === op)
      .map((x) => ({ label: x.name, value: x[key], ours: !/ptp|bridge/.test(x.name) }));
  const panels: ChartPanel[] = [
    { title: 'Attach latency p50', unit: 'ms', better: 'lower', bars: bars('attach', 'p50Ms') },
    { title: 'Detach latency p50', unit: 'ms', better: 'lower', bars: bars('detach', 'p50Ms') },
    {
      title: `Attaches per second, ${r.params.parallel} in flight`,
      unit: '/s',
      better: 'higher',
      bars: bars('attach', 'perSecondAtParallel'),
    },
    {
      title: `Detaches per second, ${r.params.parallel} in flight`,
      unit: '/s',
      better: 'higher',
      bars: bars('detach', 'perSecondAtParallel'),
    },
  ];
  if (r.containerd.length) {
    panels.push({
      title: 'containerd pod run+stop+remove p50',
      unit: 'ms',
      better: 'lower',
      bars: r.containerd.map((c) => ({
        label: c.name,
        value: c.p50Ms,
        ours: c.name.includes('workloadnet'),
      })),
    });
  }
  return renderChart(
    'workloadnet vs. reference CNI plugins',
    `${r.at}, ${r.machine.cpus}x ${r.machine.model}; count ${r.params.count}`,
    panels,
  );
}

async function main(): Promise<void> {
  const fromJson = arg('from-json');
  const svgOut = arg('svg');
  if (fromJson) {
    const r = JSON.parse(fs.readFileSync(fromJson, 'utf8')) as Report;
    print(r);
    if (svgOut) fs.writeFileSync(svgOut, chart(r));
    return;
  }
  if (process.getuid?.() !== 0) throw new Error('benchmarks need root: they create network namespaces');
  const count = Number(arg('count') ?? 100);
  const parallel = Number(arg('parallel') ?? 16);
  const pods = Number(arg('pods') ?? 10);
  const only = arg('only')?.split(',');
  const want = (s: string): boolean => !only || only.includes(s);
  const cpu = os.cpus()[0];
  const r: Report = {
    at: new Date().toISOString(),
    machine: {
      cpus: os.cpus().length,
      model: cpu?.model ?? 'unknown',
      node: process.version,
      kernel: os.release(),
    },
    params: { count, parallel, pods },
    dataplane: [],
    cni: [],
    cniForwarder: [],
    containerd: [],
    core: [],
    allocator: [],
    dpu: [],
    ratios: {},
  };
  const step = (what: string): void => console.error(`bench: ${what}`);
  if (want('dataplane')) {
    const loop = monitorEventLoopDelay({ resolution: 1 });
    loop.enable();
    step('ptp + host-local');
    r.dataplane.push(...(await benchReferenceCni({ plugin: 'ptp', count, parallel })));
    step('bridge + host-local');
    r.dataplane.push(...(await benchReferenceCni({ plugin: 'bridge', count, parallel })));
    step('linux backend (in process)');
    // Its sequential rows carry the rate at `parallel` too; the extra "(N in flight)" rows repeat it.
    const backendRows = (await benchLinuxBackend({ count, parallel })).filter(
      (x) => !x.name.includes('in flight'),
    );
    r.dataplane.push(...backendRows.map((x) => ({ ...x, name: 'linux backend (in process)' })));
    step('daemon with the linux backend, over gRPC');
    r.dataplane.push(...(await benchDaemonLinux({ count, parallel })));
    loop.disable();
    r.benchLoopMaxDelayMs = loop.max / 1e6;
  }
  if (want('cni')) {
    step('workloadnet-cni forwarder, executed like ptp');
    r.cni.push(...(await benchWorkloadnetCni({ count, parallel })));
    step('forwarder overhead');
    r.cniForwarder.push(...(await benchCniShim({ count: Math.max(50, count) })));
  }
  if (want('containerd')) {
    step('containerd + bridge');
    r.containerd.push(await benchContainerdWithReferenceBridge(pods));
    step('containerd + workloadnet');
    r.containerd.push(await benchWorkloadnetContainerd(pods));
  }
  if (want('core')) {
    step('core over gRPC with the recording backend');
    r.core.push(...(await benchDaemonRecording({ count: Math.max(count, 500), parallel })));
    step('allocator');
    r.allocator.push(...benchAllocator());
  }
  if (want('dpu')) {
    step('dpu backend + simulator');
    r.dpu.push(...(await benchDpu({ count: Math.max(count, 500), ports: 5000 })));
  }
  if (want('scale')) {
    step('scale: 10,000 attachments held by the daemon (DPU backend + simulator, dataplane off)');
    r.scale = await benchScale({ attachments: Number(arg('scale') ?? 10_000), parallel: 32 });
  }
  r.ratios = ratios(r);
  print(r);
  const jsonOut = arg('json');
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(r, null, 2) + '\n');
  if (svgOut) fs.writeFileSync(svgOut, chart(r));
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
