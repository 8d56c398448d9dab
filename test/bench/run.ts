// `npm run bench`: workloadnet side by side with Debian's reference CNI plugins and with the kernel's
// floor (the same netlink messages sent synchronously from C), in one run on one machine, reported as
// medians and ratios (the machines are noisy; absolute numbers travel badly). See USAGE below.
// The in-process Linux backend gets the same threadpool as the daemon.
import '../../cli/threadpool';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { benchAllocator } from './allocator.bench';
import { benchPools } from './pools.bench';
import { benchPolicy } from './policy.bench';
import { renderChart, type ChartPanel } from './chart';
import { benchCniShim } from './cni-shim.bench';
import { benchContainerdWithReferenceBridge, type ContainerdPodResult } from './containerd.bench';
import { FRESH_DAEMON_ROW, benchDaemonLinux, benchDaemonRecording } from './daemon.bench';
import { benchDaemonBurst, type BurstMetric } from './burst.bench';
import { benchDpu } from './dpu.bench';
import { benchDpuFleet } from './dpu-fleet.bench';
import { benchDpuFabric } from './dpu-fabric.bench';
import { benchFabric, type FabricBenchRow } from './fabric.bench';
import { FLOOR_ROW_NAME, FLOOR_STEPS, benchDiskFlush, benchFloor } from './floor.bench';
import { benchLinuxBackend } from './linux-backend.bench';
import { benchReferenceCni } from './reference-cni';
import { benchScale } from './scale.bench';
import { benchSoak, printSoak, soakOptionsFromArgs, type SoakResult } from './soak.bench';
import { loopStallMs } from './stats';
import { benchWorkloadnetCni, benchWorkloadnetContainerd } from './workloadnet-cni.bench';
import { WARM_OPS_DEFAULT } from './warm-up';

interface LatencyRow {
  name: string;
  op: 'attach' | 'detach';
  p50Ms: number;
  p99Ms: number;
  perSecondAtParallel: number;
  maxEventLoopDelayMs?: number;
  /** User + system CPU per operation over the rate run (see docs/benchmarks.md for whose). */
  cpuMsPerOp?: number;
  cpuSysMsPerOp?: number;
}

/** A row's cost in multiples of the floor's (1 = the floor; lower is better). */
interface FloorRatio {
  name: string;
  op: 'attach' | 'detach';
  p50: number;
  /** Floor rate / row rate at `parallel` in flight. */
  rate: number;
  cpu?: number;
}

interface Report {
  at: string;
  machine: { cpus: number; model: string; node: string; kernel: string };
  params: { count: number; parallel: number; pods: number; warm?: number };
  dataplane: LatencyRow[];
  cni: LatencyRow[];
  cniForwarder: Array<{ name: string; p50Ms: number; p99Ms: number }>;
  containerd: ContainerdPodResult[];
  core: LatencyRow[];
  allocator: Array<{ name: string; value: number; unit: string }>;
  dpu: Array<{ name: string; value: number; unit: string }>;
  scale?: Array<{ name: string; value: number; unit: string }>;
  pools?: Array<{ name: string; value: number; unit: string }>;
  fabric?: FabricBenchRow[];
  policy?: Array<{ name: string; value: number; unit: string }>;
  soak?: SoakResult;
  burst?: BurstMetric[];
  ratios: Record<string, number>;
  /** The floor's p50s beside ptp's, and every dataplane/CNI row in multiples of the floor. */
  floor?: {
    attachP50Ms: number;
    detachP50Ms: number;
    attachCpuMsPerOp?: number;
    detachCpuMsPerOp?: number;
    ptpAttachP50Ms?: number;
    ptpDetachP50Ms?: number;
    /** One pwrite + fdatasync where the daemon's store lives: the floor of a durable write. */
    diskFlushP50Ms?: number;
    /** The floor's sequential attach with the CPU caches evicted before each one, p50. */
    coldAttachP50Ms?: number;
    /** The floor's sequential attach step by step, p50 µs. */
    attachStepsP50Us?: Record<string, number>;
    rows: FloorRatio[];
  };
  /** Measured with the floor, copied into `floor` by floorSummary. */
  floorStepsP50Us?: Record<string, number>;
  /** Measured with the floor, copied into `floor` by floorSummary. */
  diskFlushP50Ms?: number;
  /** Measured with the floor, copied into `floor` by floorSummary. */
  floorColdAttachP50Ms?: number;
  /** Largest event-loop delay seen in this (benchmark) process during the dataplane section. */
  benchLoopMaxDelayMs?: number;
}

const SECTIONS = [
  'dataplane',
  'cni',
  'burst',
  'containerd',
  'core',
  'pools',
  'dpu',
  'scale',
  'fabric',
  'policy',
  'soak',
] as const;
/** Sections run only when --only names them: they take half an hour. */
const ON_REQUEST: ReadonlyArray<(typeof SECTIONS)[number]> = ['soak'];

const USAGE = `usage: npm run bench -- [options]        (as root: the benchmark creates network namespaces)
       node dist/test/bench/run.js --from-json FILE [--svg FILE]   (print and re-chart a saved run)

Measures workloadnet beside Debian's reference CNI plugins (ptp, bridge + host-local) and the kernel's
floor (the Linux backend's netlink messages sent synchronously from C), in one run on this machine.

options:
  --count N       operations per latency and rate run (default 100)
  --parallel N    operations in flight for the rates (default 16)
  --pods N        containerd pods per row (default 10)
  --burst N       concurrent Attach calls in the daemon burst (default 200)
  --warm N        untimed attaches (and detaches) a long-running process serves before it is
                  measured: the daemon rows, the in-process rows (default ${WARM_OPS_DEFAULT}; its JIT
                  settles after ~2,600); the daemon row is also measured fresh, right after start
  --scale N       attachments held by the scale section (default 10000)
  --soak-minutes N  how long the soak section churns after its warm-up (default 30)
  --only a,b      sections to run (default all but soak): ${SECTIONS.join(', ')}
  --json FILE     write the full report as JSON
  --svg FILE      write the chart
  -h, --help      this text

sections:
  dataplane   floor, ptp, bridge, the Linux backend in process, the daemon over gRPC
  cni         the workloadnet-cni forwarder executed like ptp; the forwarder's own overhead
  burst       N concurrent attaches/detaches to the daemon: CPU per op, Status latency, event-loop delay
  containerd  whole pods through containerd, bridge vs workloadnet
  core        the daemon over gRPC with a recording backend; the allocator
  pools       attach with the etcd pool source against the static one (a real 3-member etcd), block
              claim latency, etcd writes per 1,000 attaches
  dpu         the DPU backend with its simulator
  scale       10,000 attachments held by the daemon (DPU backend + simulator)
  fabric      three daemons on a test-owned underlay (hybrid, static peers file): join → first reply
              and leave → entries gone (p50/p95), 2,000 peers programmed and removed, RSS, attach
              with the fabric on vs off; a daemon on the dpu backend (vxlan) and a simulated DPU
              (dataplane none, then netns): 5,000-peer snapshot acknowledged, one peer change
              acknowledged (p50/p95)
  policy      a daemon (Linux backend, Kubernetes source) with 1,000 local pods and 1,000 NetworkPolicies:
              a label change and a policy change from the API server to the kernel (p50/p99, seen by
              nft monitor), attach with policy on vs off, the daemon's RSS on vs off
  soak        --soak-minutes of attach/detach churn on a Linux and a DPU network at once, the agent
              restarted every 3 minutes: memory, descriptors, store size, event loop and leaks over time
              (only with --only soak)`;

const KNOWN_OPTIONS = new Set([
  'count',
  'parallel',
  'pods',
  'burst',
  'warm',
  'scale',
  'soak-minutes',
  'only',
  'json',
  'svg',
  'from-json',
]);

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** Rejects unknown options and options without a value, before anything is created. */
function checkArgs(argv: readonly string[]): void {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    const name = a.replace(/^--/, '');
    if (!a.startsWith('--') || !KNOWN_OPTIONS.has(name)) throw new UsageError(`unknown argument "${a}"`);
    const v = argv[i + 1];
    if (v === undefined || v.startsWith('--')) throw new UsageError(`${a} needs a value`);
    i++;
  }
}

function positiveInt(name: string, fallback: number): number {
  const raw = arg(name);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1)
    throw new UsageError(`--${name} must be a positive integer, not "${raw}"`);
  return n;
}

class UsageError extends Error {}

const find = (rows: LatencyRow[], name: string, op: 'attach' | 'detach'): LatencyRow | undefined =>
  rows.find((r) => r.name.startsWith(name) && r.op === op);

function ratios(r: Report): Record<string, number> {
  const out: Record<string, number> = {};
  const ptpA = find([...r.dataplane, ...r.cni], 'ptp', 'attach');
  const ptpD = find([...r.dataplane, ...r.cni], 'ptp', 'detach');
  for (const [label, name] of [
    ['daemon', 'workloadnet daemon (linux'],
    ['fresh daemon', FRESH_DAEMON_ROW],
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

function floorSummary(r: Report): Report['floor'] {
  const rows = [...r.dataplane, ...r.cni];
  const fa = find(rows, FLOOR_ROW_NAME, 'attach');
  const fd = find(rows, FLOOR_ROW_NAME, 'detach');
  if (!fa || !fd) return undefined;
  const ptpA = find(rows, 'ptp', 'attach');
  const ptpD = find(rows, 'ptp', 'detach');
  return {
    attachP50Ms: fa.p50Ms,
    detachP50Ms: fd.p50Ms,
    attachCpuMsPerOp: fa.cpuMsPerOp,
    detachCpuMsPerOp: fd.cpuMsPerOp,
    ptpAttachP50Ms: ptpA?.p50Ms,
    ptpDetachP50Ms: ptpD?.p50Ms,
    diskFlushP50Ms: r.diskFlushP50Ms,
    coldAttachP50Ms: r.floorColdAttachP50Ms,
    attachStepsP50Us: r.floorStepsP50Us,
    rows: rows
      .filter((x) => x.name !== FLOOR_ROW_NAME)
      .map((x) => {
        const f = x.op === 'attach' ? fa : fd;
        return {
          name: x.name,
          op: x.op,
          p50: x.p50Ms / f.p50Ms,
          rate: f.perSecondAtParallel / x.perSecondAtParallel,
          ...(x.cpuMsPerOp !== undefined && f.cpuMsPerOp ? { cpu: x.cpuMsPerOp / f.cpuMsPerOp } : {}),
        };
      }),
  };
}

function print(r: Report): void {
  const line = (cells: string[], widths: number[]): string =>
    cells.map((c, i) => c.padEnd(widths[i] ?? 10)).join('  ');
  const w = [38, 7, 9, 9, 9, 11, 10, 8, 8, 8];
  console.log(
    `\nworkloadnet benchmarks ${r.at} on ${r.machine.cpus}x ${r.machine.model}, node ${r.machine.node}, kernel ${r.machine.kernel}`,
  );
  const warm =
    r.params.warm === undefined
      ? ''
      : `, ${r.params.warm} untimed attaches before a long-running process is measured`;
  console.log(
    `count ${r.params.count}, ${r.params.parallel} in flight for rates, ${r.params.pods} pods${warm}\n`,
  );
  const f = r.floor;
  if (f) {
    const ptp = (v: number | undefined): string => (v === undefined ? 'not run' : `${v.toFixed(2)} ms`);
    console.log(
      `floor p50: attach ${f.attachP50Ms.toFixed(2)} ms (ptp+host-local ${ptp(f.ptpAttachP50Ms)}), ` +
        `detach ${f.detachP50Ms.toFixed(2)} ms (ptp+host-local ${ptp(f.ptpDetachP50Ms)}); ` +
        `one disk flush (the store's) ${f.diskFlushP50Ms === undefined ? 'not measured' : `${f.diskFlushP50Ms.toFixed(2)} ms`}`,
    );
    if (f.coldAttachP50Ms !== undefined)
      console.log(
        `floor attach p50 with the CPU caches evicted before each (16 MiB written): ${f.coldAttachP50Ms.toFixed(2)} ms`,
      );
    if (f.attachStepsP50Us)
      console.log(
        `floor attach, p50 µs per step: ${Object.entries(f.attachStepsP50Us)
          .map(([k, v]) => `${k} ${v}`)
          .join('; ')}`,
      );
    console.log('');
  }
  console.log(
    line(
      [
        'dataplane / CNI',
        'op',
        'p50 ms',
        'p99 ms',
        `/s @${r.params.parallel}`,
        'CPU ms/op',
        'sys ms/op',
        'p50 ×fl',
        'rate ×fl',
        'CPU ×fl',
      ],
      w,
    ),
  );
  const num = (v: number | undefined, digits: number): string =>
    v === undefined || !Number.isFinite(v) ? '' : v.toFixed(digits);
  for (const row of [...r.dataplane, ...r.cni, ...r.core]) {
    const fr = f?.rows.find((x) => x.name === row.name && x.op === row.op);
    const isFloor = row.name === FLOOR_ROW_NAME;
    console.log(
      line(
        [
          row.name,
          row.op,
          row.p50Ms.toFixed(2),
          row.p99Ms.toFixed(2),
          row.perSecondAtParallel.toFixed(0),
          num(row.cpuMsPerOp, 3),
          num(row.cpuSysMsPerOp, 3),
          isFloor ? '1' : num(fr?.p50, 1),
          isFloor ? '1' : num(fr?.rate, 1),
          isFloor ? '1' : num(fr?.cpu, 1),
        ],
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
  for (const a of [...(r.burst ?? []), ...r.allocator, ...(r.pools ?? []), ...r.dpu, ...(r.scale ?? [])])
    console.log(`${a.name}: ${a.value.toFixed(2)} ${a.unit}`);
  for (const a of r.fabric ?? []) console.log(`fabric: ${a.name}: ${a.value} ${a.unit}`);
  for (const a of r.policy ?? []) console.log(`${a.name}: ${a.value.toFixed(2)} ${a.unit}`);
  if (r.soak) printSoak(r.soak);
  const burstCpu = r.burst?.find((b) => /^daemon CPU per attach,/.test(b.name));
  if (burstCpu && f?.attachCpuMsPerOp)
    console.log(
      `${burstCpu.name} / floor CPU per attach: ${(burstCpu.value / f.attachCpuMsPerOp).toFixed(1)}x`,
    );
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
      .map((x) => ({ label: x.name, value: x[key], ours: !/ptp|bridge|floor/.test(x.name) }));
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
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(USAGE);
    return;
  }
  checkArgs(argv);
  const fromJson = arg('from-json');
  const svgOut = arg('svg');
  if (fromJson) {
    const r = JSON.parse(fs.readFileSync(fromJson, 'utf8')) as Report;
    print(r);
    if (svgOut) fs.writeFileSync(svgOut, chart(r));
    return;
  }
  if (process.getuid?.() !== 0) throw new Error('benchmarks need root: they create network namespaces');
  const count = positiveInt('count', 100);
  const parallel = positiveInt('parallel', 16);
  const pods = positiveInt('pods', 10);
  const burstSize = positiveInt('burst', 200);
  const warmOps = positiveInt('warm', WARM_OPS_DEFAULT);
  const scale = positiveInt('scale', 10_000);
  const soakMinutes = positiveInt('soak-minutes', 30);
  const only = arg('only')?.split(',');
  const unknown = only?.filter((x) => !(SECTIONS as readonly string[]).includes(x)) ?? [];
  if (unknown.length > 0)
    throw new UsageError(`unknown section(s) ${unknown.join(', ')}; sections: ${SECTIONS.join(', ')}`);
  const want = (s: (typeof SECTIONS)[number]): boolean => (only ? only.includes(s) : !ON_REQUEST.includes(s));
  const cpu = os.cpus()[0];
  const r: Report = {
    at: new Date().toISOString(),
    machine: {
      cpus: os.cpus().length,
      model: cpu?.model ?? 'unknown',
      node: process.version,
      kernel: os.release(),
    },
    params: { count, parallel, pods, warm: warmOps },
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
    step('floor: the same netlink messages, synchronously from C');
    const floor = await benchFloor({ count, parallel });
    r.dataplane.push(...floor.rows);
    r.floorStepsP50Us = Object.fromEntries(FLOOR_STEPS.map((s, k) => [s, floor.attachStepsP50Us[k] ?? NaN]));
    r.diskFlushP50Ms = benchDiskFlush();
    r.floorColdAttachP50Ms = floor.coldAttachP50Ms;
    step('ptp + host-local');
    r.dataplane.push(...(await benchReferenceCni({ plugin: 'ptp', count, parallel })));
    step('bridge + host-local');
    r.dataplane.push(...(await benchReferenceCni({ plugin: 'bridge', count, parallel })));
    step('linux backend (in process)');
    // Its sequential rows carry the rate at `parallel` too; the extra "(N in flight)" rows repeat it.
    const backendRows = (await benchLinuxBackend({ count, parallel, warmOps })).filter(
      (x) => !x.name.includes('in flight'),
    );
    r.dataplane.push(...backendRows.map((x) => ({ ...x, name: 'linux backend (in process)' })));
    step('daemon with the linux backend, over gRPC');
    r.dataplane.push(...(await benchDaemonLinux({ count, parallel, warmOps })));
    loop.disable();
    r.benchLoopMaxDelayMs = loopStallMs(loop.max / 1e6, 1);
  }
  if (want('cni')) {
    step('workloadnet-cni forwarder, executed like ptp');
    r.cni.push(...(await benchWorkloadnetCni({ count, parallel, warmOps })));
    step('forwarder overhead');
    r.cniForwarder.push(...(await benchCniShim({ count: Math.max(50, count) })));
  }
  if (want('burst')) {
    step(`daemon burst: ${burstSize} concurrent attaches, then detaches`);
    r.burst = await benchDaemonBurst({ burst: burstSize, warmOps });
  }
  if (want('containerd')) {
    step('containerd + bridge');
    r.containerd.push(await benchContainerdWithReferenceBridge(pods));
    step('containerd + workloadnet');
    r.containerd.push(await benchWorkloadnetContainerd(pods));
  }
  if (want('core')) {
    step('core over gRPC with the recording backend');
    r.core.push(...(await benchDaemonRecording({ count: Math.max(count, 500), parallel, warmOps })));
    step('allocator');
    r.allocator.push(...benchAllocator());
  }
  if (want('pools')) {
    step('pool sources: etcd against static (a real 3-member etcd cluster)');
    r.pools = await benchPools({ count: Math.max(count, 200), parallel: Math.min(parallel, 8) });
  }
  if (want('dpu')) {
    step('dpu backend + simulator');
    r.dpu.push(...(await benchDpu({ count: Math.max(count, 500), ports: 5000 })));
    step('dpu fleet: netns dataplane, two agents');
    r.dpu.push(...(await benchDpuFleet({ count: Math.max(count, 500) })));
  }
  if (want('scale')) {
    step('scale: 10,000 attachments held by the daemon (DPU backend + simulator, dataplane off)');
    r.scale = await benchScale({ attachments: scale, parallel: 32 });
  }
  if (want('fabric')) {
    step('fabric: join/leave, 2,000 peers, attach with the fabric on vs off (three daemons, hybrid)');
    r.fabric = await benchFabric({ reps: 20 });
    step('fabric: a simulated DPU, 5,000-peer snapshot and one peer change acknowledged (dpu backend)');
    r.fabric.push(...(await benchDpuFabric({ rounds: 10, snapshots: 3 })));
  }
  if (want('policy')) {
    step('policy: 1,000 local pods and 1,000 NetworkPolicies: change -> kernel, attach on vs off, RSS');
    r.policy = await benchPolicy({});
  }
  if (want('soak')) {
    step('soak: attach/detach churn on a Linux and a DPU network, agent restarts');
    r.soak = await benchSoak({ ...soakOptionsFromArgs(), minutes: soakMinutes });
  }
  r.ratios = ratios(r);
  r.floor = floorSummary(r);
  print(r);
  const jsonOut = arg('json');
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(r, null, 2) + '\n');
  if (svgOut) fs.writeFileSync(svgOut, chart(r));
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    if (err instanceof UsageError) {
      console.error(`bench: ${err.message}\n\n${USAGE}`);
      process.exit(2);
    }
    console.error(err);
    process.exit(1);
  },
);
