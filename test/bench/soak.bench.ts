import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { DEFAULT_CONFIG } from '../../core/config';
import { STORE_FILE } from '../../core/store/store-environment';
import { SimProcess, sleep } from '../support/sim-process';
import { spawnInNetns } from '../e2e/support/spawn-in-netns';
import { attachRequest, detachRequest } from '../support/attach-request';
import { childOutput } from '../support/child-output';
import { DaemonProcess } from '../support/daemon-process';
import { outcome } from '../support/grpc-outcome';
import { hostLinksInGroup, linuxHostLinks } from '../support/kernel-view';
import { NetnsSet, addNodeUplink, type TestNamespace } from '../support/netns';
import { SoakPeers, fabricFigures, kernelFabricRoutes, type SoakFabricFigures } from './soak-fabric';
import { soakTable } from './soak-table';
import { netnsDataplane } from '../support/simulated-dpu';
import { INTERFACES, linkNames } from '../support/mixed-networks';

// Soak: the real daemon for half an hour (or --soak-minutes) under attach/detach churn at a steady rate
// on two networks at once, `default` (Linux backend: veths) and `fast` (DPU backend: the simulator in
// netns mode moves a "VF" into the workload), with the simulator (the DPU agent) restarted every few
// minutes. A node daemon runs for months: leaks of a few bytes per attach, a store that grows with churn
// or descriptors an agent restart leaves open show only over time, which no other bench runs long enough
// to see.
//
// At each sample (the first right after a warm-up, then every --sample-minutes) the churn pauses and
// the daemon settles (the agent resynced, no call in flight), then: the daemon's RSS and open
// descriptors (/proc), heap used and event-loop p99 (its Prometheus endpoint; the p99 covers the churn
// since the previous sample, prom-client resets it on each scrape), the store file's allocated size, and
// what should exactly match the rows the daemon lists: its host veths in the node namespace (and none
// left in the detach group), the simulator's ports and the VFs out in the DPU namespace, the pools'
// used addresses, and the interfaces in the workloads. Figures are compared with the first sample; a
// growth above 5 % is flagged.
//
//   node dist/test/bench/soak.bench.js [--soak-minutes 30] [--sample-minutes 5] [--soak-rate 10]
//   npm run bench -- --only soak --soak-minutes 30

const GC_HOOK = path.join(__dirname, 'gc-on-signal-hook.js');

const DEFAULT_POOL = '10.246.0.0/20';
const FAST_POOL = '10.246.16.0/20';
const METRICS_ADDR = '127.0.0.1:9466';
const NODE_IP = '10.250.0.1';
const DPU_VTEP = '10.250.1.1';
/** Links of the DPU namespace that are not VFs: its loopback, uplink and the fabric's VXLAN device. */
const DPU_NOT_VFS = new Set(['lo', 'up0', 'up1', 'wn-vxlan']);

export interface SoakOptions {
  minutes: number;
  /** Minutes between two samples after the first. */
  sampleMinutes: number;
  /** Attach or detach calls started per second. */
  rate: number;
  /** Minutes between two restarts of the agent. */
  restartMinutes: number;
  /** Workload namespaces; each may hold eth0 on `default` and net1 on `fast`. */
  workloads: number;
  /** Churn before the first sample, so that V8's code and the daemon's caches are settled. */
  warmMinutes: number;
  /** Synthetic peers in the fabric's peers file. */
  peers: number;
  /** Seconds between two changes of the peers file (one peer leaves or comes back). */
  peerChurnSeconds: number;
  /** fabric.withdrawGraceSeconds: short, so that withdrawn peers leave the tables under the churn. */
  graceSeconds: number;
  log?: (line: string) => void;
}

export interface SoakSample {
  atMin: number;
  rssMiB: number;
  heapUsedMiB: number;
  /** Of the heap used, V8's compiled code (code space). */
  codeMiB: number;
  fds: number;
  storeKiB: number;
  loopP99Ms: number;
  rows: number;
  /** What is there beyond what the rows account for (0 when nothing leaked). */
  leaks: {
    hostLinks: number;
    detachGroupLinks: number;
    simPorts: number;
    dpuNetnsLinks: number;
    addresses: number;
    workloadInterfaces: number;
  };
  fabric: SoakFabricFigures;
}

/** During the warm-up, every minute without pausing the churn: where RSS and the heap settle. */
export interface WarmUpPoint {
  atMin: number;
  rssMiB: number;
  heapUsedMiB: number;
  codeMiB: number;
  oldCommittedMiB: number;
  newCommittedMiB: number;
  /** Everything the hook read after the collection (process.memoryUsage() and V8's spaces, MiB). */
  after: Record<string, number>;
}

export interface SoakResult {
  samples: SoakSample[];
  counts: { attachOk: number; attachFailed: number; detachOk: number; detachFailed: number; skipped: number };
  agentRestarts: number;
  peerChanges: { added: number; removed: number };
  warmUp: WarmUpPoint[];
  /** Lines of the table docs/benchmarks.md carries, and what grew beyond 5 %. */
  table: string[];
  flagged: string[];
}

/** A Prometheus figure of the daemon, scraped inside its node namespace. */
async function scrape(nodePath: string): Promise<Map<string, number>> {
  const { code, stdout, stderr } = await childOutput(
    spawnInNetns(nodePath, 'curl', ['-sS', '--max-time', '10', `http://${METRICS_ADDR}/metrics`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  if (code !== 0) throw new Error(`scraping the daemon's metrics failed (${code}): ${stderr}`);
  const out = new Map<string, number>();
  for (const m of stdout.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? ([0-9.eE+-]+)$/gm))
    if (m[1] && m[2] && !out.has(m[1])) out.set(m[1], Number(m[2]));
  return out;
}

function vmRssMiB(pid: number): number {
  const line = fs
    .readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(line?.split(/\s+/)[1] ?? NaN) / 1024;
}

/** Blocks the store file occupies (its size on disk, not the map it reserves). */
function storeKiB(stateDir: string): number {
  let blocks = 0;
  for (const f of fs.readdirSync(stateDir))
    if (f.startsWith(STORE_FILE)) blocks += fs.statSync(path.join(stateDir, f)).blocks;
  return (blocks * 512) / 1024;
}

export async function benchSoak(o: SoakOptions): Promise<SoakResult> {
  const log = o.log ?? ((line: string) => console.error(`soak: ${line}`));
  const namespaces = new NetnsSet('wns-');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-soak-'));
  const agentSocket = path.join(dir, 'agent.sock');
  const configFile = path.join(dir, 'config.json');
  const stateFile = path.join(dir, 'sim-state.json');
  const peersFile = path.join(dir, 'peers.json');
  let daemon: DaemonProcess | undefined;
  let sim: SimProcess | undefined;
  try {
    const node = namespaces.addNode(NODE_IP);
    // The DPU's uplink: its VTEP address, and a default route to the (synthetic) peers' underlay.
    const dpu = namespaces.add('dpu');
    addNodeUplink(dpu.name, DPU_VTEP);
    const peers = new SoakPeers(peersFile, o.peers, 2 * o.graceSeconds * 1000);
    const workloads: Array<{ id: string; ns: TestNamespace }> = namespaces
      .addMany(o.workloads, 'w')
      .map((ns, i) => ({ id: `soak-${i}`, ns }));
    fs.writeFileSync(
      configFile,
      JSON.stringify({
        // The loop sampled finely: the soak reads its p99 (the daemon's default samples every 100 ms).
        eventLoopResolutionMs: 10,
        // No host port: the soak accounts for every link and row by its own workloads' churn.
        dpu: { agentSocket, hostPort: false },
        fabric: {
          mode: 'vxlan',
          nodeIp: NODE_IP,
          peersFile,
          withdrawGraceSeconds: o.graceSeconds,
        },
        networks: [
          { name: 'default', backend: 'linux', podCidrs: [DEFAULT_POOL] },
          { name: 'fast', backend: 'dpu', podCidrs: [FAST_POOL] },
        ],
      }),
    );
    // The daemon runs a full collection when told (gc-on-signal-hook.ts): "heap used" is then the
    // live heap rather than wherever the collector happened to be.
    const hookDir = path.join(dir, 'hook');
    fs.mkdirSync(hookDir);
    const saved = { options: process.env.NODE_OPTIONS, dir: process.env.WN_GC_HOOK_DIR };
    process.env.NODE_OPTIONS = `${saved.options ?? ''} --expose-gc --require ${GC_HOOK}`.trim();
    process.env.WN_GC_HOOK_DIR = hookDir;
    const d = (daemon = await DaemonProcess.start({
      dir,
      netns: node.name,
      flags: { config: configFile, 'metrics-listen': METRICS_ADDR, 'log-level': 'warn' },
    }).finally(() => {
      process.env.NODE_OPTIONS = saved.options;
      if (saved.options === undefined) delete process.env.NODE_OPTIONS;
      process.env.WN_GC_HOOK_DIR = saved.dir;
      if (saved.dir === undefined) delete process.env.WN_GC_HOOK_DIR;
    }));
    const pid = d.child.pid ?? 0;
    const startSim = (): SimProcess =>
      SimProcess.start({
        socket: agentSocket,
        agentId: 'soak',
        stateFile,
        extra: [
          ...netnsDataplane(dpu.name, node.path),
          '--vtep-address',
          DPU_VTEP,
          '--protocol',
          '3',
          '--log-level',
          'warn',
        ],
      });
    sim = startSim();

    /** Ready, and the agent's current session has applied its snapshot. */
    const resynced = async (): Promise<void> => {
      const until = Date.now() + 60_000;
      for (;;) {
        const st = await d.client.status();
        const sessionId = st.networks.find((n) => n.name === 'fast')?.backendDetails.sessionId;
        const state = sim?.state();
        if (
          st.ready &&
          state?.pid === sim?.child.pid &&
          state?.synced &&
          state?.session.sessionId === sessionId
        )
          return;
        if (Date.now() > until) throw new Error(`no resync within 60 s (${st.reasons.join('; ')})`);
        await sleep(50);
      }
    };
    await resynced();

    // The churn: every 1/rate s one call on a random interface of a random workload, attaching it if
    // it is not attached and detaching it if it is, so that about half are attached at any time; at
    // most four in flight (a tick finding four skips).
    const counts = { attachOk: 0, attachFailed: 0, detachOk: 0, detachFailed: 0, skipped: 0 };
    const attached = new Set<string>();
    const busy = new Set<string>();
    let inFlight = 0;
    const oneCall = async (): Promise<void> => {
      const w = workloads[Math.floor(Math.random() * workloads.length)];
      const i = INTERFACES[Math.floor(Math.random() * INTERFACES.length)];
      if (!w || !i) return;
      const key = `${w.id}/${i.ifName}`;
      if (busy.has(key)) return;
      busy.add(key);
      inFlight++;
      try {
        if (!attached.has(key)) {
          const r = await outcome(
            d.client.call(
              d.client.raw.attach,
              attachRequest(w.id, w.ns.path, i.ifName, { network: i.network }),
            ),
          );
          if (r.code === grpc.status.OK) {
            counts.attachOk++;
            attached.add(key);
          } else counts.attachFailed++;
        } else {
          const r = await outcome(
            d.client.call(d.client.raw.detach, detachRequest(w.id, w.ns.path, i.ifName)),
          );
          if (r.code === grpc.status.OK) {
            counts.detachOk++;
            attached.delete(key);
          } else counts.detachFailed++;
        }
      } finally {
        inFlight--;
        busy.delete(key);
      }
    };
    let churning = false;
    let ticker: NodeJS.Timeout | undefined;
    let peerTicker: NodeJS.Timeout | undefined;
    const startChurn = (): void => {
      churning = true;
      ticker = setInterval(() => {
        if (!churning) return;
        if (inFlight >= 4) counts.skipped++;
        else void oneCall();
      }, 1000 / o.rate);
      peerTicker = setInterval(() => peers.churn(), o.peerChurnSeconds * 1000);
    };
    const stopChurn = async (): Promise<void> => {
      churning = false;
      clearInterval(ticker);
      clearInterval(peerTicker);
      while (inFlight > 0) await sleep(20);
    };

    type Settled = SoakSample['leaks'] & { rows: number; fabric: SoakFabricFigures };
    /**
     * Reads until nothing is unaccounted for (the kernel, the state file and the fabric's applies settle
     * asynchronously: a peer change is coalesced, then applied) or 60 s have passed.
     */
    const settledLeaks = async (): Promise<Settled> => {
      let last: Settled | undefined;
      const until = Date.now() + 60_000;
      while (Date.now() < until) {
        const list = (await d.client.call(d.client.raw.list, {})).attachments;
        const status = await d.client.status();
        const of = (n: string) => list.filter((a) => a.network === n);
        const used = status.networks.reduce((s, n) => s + n.pools.reduce((t, p) => t + p.used, 0), 0);
        const inWorkloads = await Promise.all(workloads.map((w) => linkNames(w.ns.name)));
        const dpuLinks = (await linkNames(dpu.name)).filter((l) => !DPU_NOT_VFS.has(l));
        const simState = sim?.state();
        const ports = simState?.ports.length ?? 0;
        const { acked, ...fabric } = fabricFigures(
          status,
          await kernelFabricRoutes(node.name),
          simState?.fabric?.length ?? 0,
          peers.size,
        );
        last = {
          fabric,
          rows: list.length,
          hostLinks: (await linuxHostLinks(node.name)).length - of('default').length,
          detachGroupLinks: (await hostLinksInGroup(node.name, DEFAULT_CONFIG.linux.detachGroup)).length,
          simPorts: ports - of('fast').length,
          // The VFs the simulator has not handed to a workload stay in its namespace; every VF it has
          // made and not taken back is a port. So the namespace holds the free VFs only: compared with
          // the first sample's.
          dpuNetnsLinks: dpuLinks.length,
          addresses: used - list.length,
          workloadInterfaces: inWorkloads.reduce((s, l) => s + l.length - 1, 0) - list.length,
        };
        const unaccounted =
          last.hostLinks !== 0 ||
          last.detachGroupLinks !== 0 ||
          last.simPorts !== 0 ||
          last.addresses !== 0 ||
          last.workloadInterfaces !== 0 ||
          list.length !== attached.size ||
          !acked ||
          Object.values(fabric.leaks).some((n) => n !== 0);
        if (!unaccounted) return last;
        await sleep(100);
      }
      if (last && last.rows !== attached.size)
        log(`rows ${last.rows} against ${attached.size} the churn's answers account for`);
      return last as Settled;
    };

    /**
     * A full collection in the daemon; with `snapshot`, a heap snapshot too (its file is returned). The
     * hook writes V8's spaces before and after the collection (`memory` is the after).
     */
    const collect = async (
      snapshot = false,
    ): Promise<{ snapshot?: string; memory?: Record<string, number> }> => {
      const before = new Set(fs.readdirSync(hookDir));
      if (snapshot) fs.writeFileSync(path.join(hookDir, 'snapshot'), '');
      process.kill(pid, 'SIGUSR2');
      // The hook runs on the daemon's main thread: once Status answers (after the signal got there),
      // it has run.
      for (;;) {
        await sleep(200);
        await d.client.status();
        const fresh = fs.readdirSync(hookDir).filter((f) => !before.has(f));
        const mem = fresh.find((f) => f.startsWith('memory-'));
        const file = fresh.find((f) => f.endsWith('.heapsnapshot'));
        if (!mem || (snapshot && !file)) continue;
        const memory = (
          JSON.parse(fs.readFileSync(path.join(hookDir, mem), 'utf8')) as {
            after: Record<string, number>;
          }
        ).after;
        fs.rmSync(path.join(hookDir, mem));
        return { ...(file ? { snapshot: path.join(hookDir, file) } : {}), memory };
      }
    };

    const t0 = Date.now();
    const samples: SoakSample[] = [];
    const sample = async (): Promise<void> => {
      await stopChurn();
      await resynced();
      await sleep(2000);
      const leaks = await settledLeaks();
      const m = await scrape(node.path);
      const rssMiB = vmRssMiB(pid);
      // Heap used as the hook read it right after the collection: a scrape after it would also count
      // what the Status call and the scrape itself allocated since (1-2 MiB, which varies).
      const { memory } = await collect();
      const s: SoakSample = {
        atMin: (Date.now() - t0) / 60_000,
        rssMiB,
        heapUsedMiB: memory?.heapUsed ?? NaN,
        codeMiB: memory?.['code_space.used'] ?? NaN,
        fds: fs.readdirSync(`/proc/${pid}/fd`).length,
        storeKiB: storeKiB(path.join(dir, 'state')),
        loopP99Ms: (m.get('nodejs_eventloop_lag_p99_seconds') ?? NaN) * 1000,
        rows: leaks.rows,
        leaks: {
          hostLinks: leaks.hostLinks,
          detachGroupLinks: leaks.detachGroupLinks,
          simPorts: leaks.simPorts,
          dpuNetnsLinks: leaks.dpuNetnsLinks,
          addresses: leaks.addresses,
          workloadInterfaces: leaks.workloadInterfaces,
        },
        fabric: leaks.fabric,
      };
      samples.push(s);
      log(
        `t=${s.atMin.toFixed(1)} min: RSS ${s.rssMiB.toFixed(1)} MiB, heap ${s.heapUsedMiB.toFixed(1)} MiB, ` +
          `fds ${s.fds}, store ${s.storeKiB} KiB, loop p99 ${s.loopP99Ms.toFixed(1)} ms, rows ${s.rows}, ` +
          `leaks ${JSON.stringify(s.leaks)}, fabric ${JSON.stringify(s.fabric)}; ${JSON.stringify(counts)}`,
      );
      startChurn();
    };

    let agentRestarts = 0;
    let lastRestart = Date.now();
    const maybeRestartAgent = async (): Promise<void> => {
      if (Date.now() - lastRestart < o.restartMinutes * 60_000) return;
      lastRestart = Date.now();
      await sim?.stop('SIGTERM');
      sim = startSim();
      agentRestarts++;
      log(`agent restarted (${agentRestarts})`);
    };

    log(
      `${o.workloads} workloads × eth0 (linux) + net1 (dpu, netns dataplane), ${o.rate} calls/s, ` +
        `fabric vxlan with ${o.peers} peers (one changing every ${o.peerChurnSeconds} s, grace ` +
        `${o.graceSeconds} s), ` +
        `warm-up ${o.warmMinutes} min, then ${o.minutes} min, agent restart every ${o.restartMinutes} min`,
    );
    startChurn();
    // Where RSS and the heap settle under the churn: a reading every minute of the warm-up (a full
    // collection each, the churn going on).
    const warmUp: WarmUpPoint[] = [];
    const warmEnd = t0 + o.warmMinutes * 60_000;
    for (let next = t0 + 60_000; next < warmEnd - 30_000; next += 60_000) {
      await sleep(next - Date.now());
      const { memory: m = {} } = await collect();
      const p: WarmUpPoint = {
        atMin: (Date.now() - t0) / 60_000,
        rssMiB: vmRssMiB(pid),
        heapUsedMiB: m.heapUsed ?? NaN,
        codeMiB: m['code_space.used'] ?? NaN,
        oldCommittedMiB: m['old_space.committed'] ?? NaN,
        newCommittedMiB: m['new_space.committed'] ?? NaN,
        after: m,
      };
      warmUp.push(p);
      log(`warm-up ${JSON.stringify(p)}`);
    }
    await sleep(Math.max(0, warmEnd - Date.now()));
    await sample();
    // The first sample resets the event-loop histogram; the soak's clock starts at it.
    const start = Date.now();
    lastRestart = start;
    let nextSample = start + o.sampleMinutes * 60_000;
    const end = start + o.minutes * 60_000;
    while (Date.now() < end) {
      await sleep(1000);
      await maybeRestartAgent();
      if (Date.now() >= Math.min(nextSample, end)) {
        await sample();
        nextSample += o.sampleMinutes * 60_000;
      }
    }
    if ((samples.at(-1)?.atMin ?? 0) < (end - t0) / 60_000 - 0.5) await sample();
    await stopChurn();
    // After every figure is read (a snapshot leaves native memory resident): what the heap holds.
    const snap = (await collect(true)).snapshot;
    const keptAs = path.join(os.tmpdir(), 'workloadnet-soak-end.heapsnapshot');
    if (snap) fs.copyFileSync(snap, keptAs);
    log(`heap snapshot at the end: ${keptAs}`);
    return {
      samples,
      counts,
      agentRestarts,
      peerChanges: { added: peers.added, removed: peers.removed },
      warmUp,
      ...soakTable(samples),
    };
  } finally {
    await sim?.stop('SIGKILL').catch(() => undefined);
    await daemon?.stop().catch(() => undefined);
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function numberArg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${name} must be a positive number`);
  return v;
}

export function soakOptionsFromArgs(): SoakOptions {
  return {
    minutes: numberArg('soak-minutes', 30),
    sampleMinutes: numberArg('sample-minutes', 5),
    rate: numberArg('soak-rate', 5),
    restartMinutes: numberArg('restart-minutes', 3),
    workloads: numberArg('soak-workloads', 40),
    warmMinutes: numberArg('warm-minutes', 15),
    peers: numberArg('soak-peers', 300),
    peerChurnSeconds: numberArg('peer-churn-seconds', 3),
    graceSeconds: numberArg('grace-seconds', 10),
  };
}

export function printSoak(r: SoakResult): void {
  console.log(
    `soak: ${JSON.stringify(r.counts)}, ${r.agentRestarts} agent restarts, ` +
      `peers ${JSON.stringify(r.peerChanges)}, ${r.samples.length} samples`,
  );
  for (const { after: _, ...p } of r.warmUp) console.log(`warm-up: ${JSON.stringify(p)}`);
  for (const line of r.table) console.log(line);
  console.log(
    r.flagged.length ? `grew > 5 %: ${r.flagged.join('; ')}` : 'nothing grew > 5 %, nothing leaked',
  );
}

if (require.main === module) {
  benchSoak(soakOptionsFromArgs()).then(
    (r) => {
      printSoak(r);
      fs.writeFileSync(path.join(os.tmpdir(), 'workloadnet-soak.json'), JSON.stringify(r, null, 2) + '\n');
      process.exit(0);
    },
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
