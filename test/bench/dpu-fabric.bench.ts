// The fabric carried by a DPU (protocol version 3): how long a simulated DPU takes to receive and
// acknowledge the full snapshot of a 5,000-peer table, and one peer change. A real daemon
// (dist/cli/workloadnet.js daemon --backend dpu --fabric vxlan, static peer source --peers-file) in a
// test-owned namespace, and a real workloadnet-dpu-sim process connected to its agent socket: in
// dataplane none (told its VTEP address with --vtep-address: control plane and acks only) and, in
// netns mode, in a test-owned DPU namespace on the fabric tests' underlay, where it programs its own
// wn-vxlan, FDB, neighbours and routes before it acknowledges.
//
// Two end points are timed. "Held": the simulator's state file and its journal (stat polled every 2 ms,
// read and parsed when either changed) show the objects; it acks nothing before that file has landed
// and acks right after, so this is the simulator's ack less a few ms. For one change, the last landing
// the stat saw before the daemon counted the ack (the file is read after, to check it holds it). "Acknowledged": Status dpus[].fabric objectsAcked ==
// objectsDesired (both at their current generations), polled after "held" with a pause between calls,
// asked as `workloadnet dpus` asks (omit_fabric_peers: no 5,000 peer rows); its duration (the
// quantisation) is reported too.
// Figures are reported against the targets, never asserted: the machines are shared.
// Run alone with: node dist/test/bench/dpu-fabric.bench.js [rounds (3 changes each)] [snapshots] [none|netns|both]

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { DpuStatus } from '../../proto/gen/workloadnet/v1/workload';
import { FabricTopology, writePeersFile, type PeersFileEntry } from '../support/fabric-topology';
import { ip } from '../support/netns-fixture';
import { journalOf, readStateFile, type SimState } from '../../backends/dpu-sim/state-file';
import { SimProcess } from '../support/sim-process';
import { netnsPath } from '../support/netns';
import { DaemonProcess } from '../support/daemon-process';
import { syntheticPeers, type FabricBenchRow } from './fabric.bench';
import { processCpu } from './process-cpu';
import { percentile } from './stats';
import { printRowsAndExit } from './bench-main';

const PEERS = 5000;
const AGENT = 'bench-dpu';
const HEARTBEAT_MS = 10_000;

type Mode = 'none' | 'netns';

interface Rig {
  daemon: DaemonProcess;
  peersFile: string;
  dir: string;
  /** Starts the simulator (a new boot id each time: it holds nothing and gets the whole snapshot). */
  startSim(boot: number): SimProcess;
}

const round = (n: number, digits = 1): number => Number(n.toFixed(digits));
const since = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1e6;

/** The agent's row in Status (without the peer rows), and how long the Status call took (ms). */
async function dpuRow(d: DaemonProcess): Promise<{ row: DpuStatus | undefined; callMs: number }> {
  const t = process.hrtime.bigint();
  const st = await d.client.status({ omitFabricPeers: true });
  return { row: st.dpus.find((x) => x.id === AGENT), callMs: since(t) };
}

/** The host port's state and how many ranges it routes, once attached (or as it is after 20 s). */
async function hostPortOf(d: DaemonProcess): Promise<{ state: string; routes: number }> {
  const until = Date.now() + 20_000;
  for (;;) {
    const hp = (await d.client.status({ omitFabricPeers: true })).fabric?.hostPort;
    const state = hp?.state ?? '';
    if (state === 'attached' || Date.now() > until) return { state, routes: hp?.routeCount ?? 0 };
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Polls Status (`pauseMs` between calls) until `done` holds for the agent's row; the time from `t0` to
 * the end of the call that saw it, and the calls' durations. Each call still costs the daemon some
 * work: polled back to back, it would take time from the ack path it measures.
 */
async function msUntilRow(
  d: DaemonProcess,
  t0: bigint,
  done: (r: DpuStatus) => boolean,
  what: string,
  calls: number[],
  pauseMs: number,
  timeoutMs = 120_000,
): Promise<number> {
  for (;;) {
    const { row, callMs } = await dpuRow(d);
    calls.push(callMs);
    if (row && done(row)) return since(t0);
    if (since(t0) > timeoutMs)
      throw new Error(
        `dpu fabric bench: ${what}: not within ${timeoutMs} ms; last row ${JSON.stringify(row)}`,
      );
    await new Promise((r) => setTimeout(r, pauseMs));
  }
}

/** Every object desired is acknowledged, by a healthy session, and there are at least `min` of them. */
const allAcked =
  (min: number, exact?: number) =>
  (r: DpuStatus): boolean => {
    const f = r.fabric;
    if (!f || !r.connected || !r.healthy || !f.carries) return false;
    if (exact !== undefined ? f.objectsDesired !== exact : f.objectsDesired < min) return false;
    return f.objectsAcked === f.objectsDesired;
  };

async function startDaemon(dir: string, netns: string, peersFile: string): Promise<DaemonProcess> {
  const config = path.join(dir, 'config.json');
  // Grace 0: a peer that leaves the file is withdrawn at once (by default it stays for 180 s), which is
  // the change the remove rows time. Heartbeats every 10 s (either side silent for 30 s is lost)
  // instead of 500 ms (1.5 s): on a loaded machine a Status call listing 5,000 peers holds the daemon's
  // event loop past 1.5 s, and the simulator, busy with the snapshot, reads nothing for seconds; either
  // side then drops the session and every snapshot starts over (sessionsEnded counts any left).
  fs.writeFileSync(
    config,
    JSON.stringify({ fabric: { withdrawGraceSeconds: 0 }, dpu: { heartbeatIntervalMs: HEARTBEAT_MS } }),
  );
  return DaemonProcess.start({
    dir,
    netns,
    flags: {
      config,
      backend: 'dpu',
      'agent-socket': path.join(dir, 'agent.sock'),
      'log-level': 'warn',
      'pod-cidr': '10.244.1.0/24',
      mtu: '1450',
      fabric: 'vxlan',
      'node-name': 'bench-node',
      'peers-file': peersFile,
    },
  });
}

/** One peer's changes, each one acknowledged before the next: add, a second prefix, remove. */
function changePeer(i: number): Array<{
  label: string;
  peers: PeersFileEntry[];
  delta: number;
  held: (names: Set<string>) => boolean;
}> {
  const [extra] = syntheticPeers(PEERS + 1, '10.120').slice(PEERS);
  if (!extra) throw new Error('no extra peer');
  const name = `peer/${extra.node}`;
  const second = `10.200.${i % 250}.0/26`;
  return [
    { label: 'add', peers: [extra], delta: 2, held: (n) => n.has(name) },
    {
      label: 'change',
      peers: [{ ...extra, prefixes: [...extra.prefixes, second] }],
      delta: 3,
      held: (n) => n.has(`route/${second}`),
    },
    { label: 'remove', peers: [], delta: 0, held: (n) => !n.has(name) && !n.has(`route/${second}`) },
  ];
}

/**
 * Polls the simulator's state file (a stat every 2 ms, read and parsed when it changed) until `done`
 * holds for a state this process wrote; the time from `t0`, and each read's cost (the quantisation).
 */
async function msUntilHeld(
  sim: SimProcess,
  t0: bigint,
  done: (s: SimState) => boolean,
  what: string,
  reads: number[],
  timeoutMs = 300_000,
): Promise<number> {
  let seen = 0;
  for (;;) {
    // Between full writes the simulator appends to the file's journal: either one moving is news.
    const mtime =
      (fs.statSync(sim.stateFile, { throwIfNoEntry: false })?.mtimeMs ?? 0) +
      (fs.statSync(journalOf(sim.stateFile), { throwIfNoEntry: false })?.mtimeMs ?? 0);
    if (mtime !== seen) {
      seen = mtime;
      const t = process.hrtime.bigint();
      const s = readStateFile(sim.stateFile);
      reads.push(since(t));
      if (s && s.pid === sim.child.pid && done(s)) return since(t0);
    }
    if (!sim.running) throw new Error(`dpu fabric bench: ${what}: the simulator exited:\n${sim.stderr}`);
    if (since(t0) > timeoutMs)
      throw new Error(
        `dpu fabric bench: ${what}: not within ${timeoutMs} ms; simulator log tail:\n${sim.stderr.slice(-3000)}`,
      );
    await new Promise((r) => setTimeout(r, 2));
  }
}

/**
 * Notes (ms from `t0`) each time the simulator's state file or journal changes, by a stat every 2 ms
 * and no read: reading and parsing the ~3 MB state takes tens of ms, which would delay the Status
 * calls timing the ack beside it.
 */
function watchLandings(sim: SimProcess, t0: bigint): { stop(): number[] } {
  const seen: number[] = [];
  const mtime = (): number =>
    (fs.statSync(sim.stateFile, { throwIfNoEntry: false })?.mtimeMs ?? 0) +
    (fs.statSync(journalOf(sim.stateFile), { throwIfNoEntry: false })?.mtimeMs ?? 0);
  let last = mtime();
  const timer = setInterval(() => {
    const now = mtime();
    if (now !== last) seen.push(since(t0));
    last = now;
  }, 2);
  return {
    stop: () => {
      clearInterval(timer);
      return seen;
    },
  };
}

/** Agent sessions the daemon has logged as ended so far (each simulator killed ends one). */
function sessionsEnded(d: DaemonProcess): number {
  const log = fs.readFileSync(d.logFile, 'utf8');
  return log.split('\n').filter((l) => l.includes('"msg":"agent session ended"')).length;
}

const names = (s: SimState): Set<string> => new Set((s.fabric ?? []).map((o) => o.name));

interface Timings {
  /** The simulator holds it: its state file lands before it acks (acks wait for the write). */
  held: number[];
  /** The daemon counts it acknowledged (Status). */
  acked: number[];
}

const timings = (): Timings => ({ held: [], acked: [] });

/**
 * CPU the daemon and the simulator spent (ms), which the machine's load does not stretch as it does
 * the wall-clock rows: on an idle machine those cannot be shorter than the larger of the two.
 */
interface CpuSpent {
  daemon: number[];
  sim: number[];
}

const cpuOf = (pid: number | undefined): number => (pid === undefined ? 0 : processCpu(pid).totalMs);

async function measure(
  rig: Rig,
  mode: Mode,
  opts: { rounds: number; snapshots: number },
  add: (name: string, value: number, unit: string) => void,
): Promise<void> {
  const base = syntheticPeers(PEERS, '10.120');
  writePeersFile(rig.peersFile, base);
  const label = mode === 'none' ? 'dataplane none (--vtep-address)' : 'netns mode (own wn-vxlan)';
  const calls: number[] = [];
  const reads: number[] = [];

  // (a) Full snapshot, from the simulator's spawn (the daemon has applied the 5,000-peer table long
  // before) to: its session connected (state file), every object held (state file, synced), and the
  // daemon counting every desired object acknowledged (Status). Each round is a new simulator process
  // with a new boot id, so it holds nothing; the daemon has seen the previous one go first.
  const snap = timings();
  const snapCpu: CpuSpent = { daemon: [], sim: [] };
  const changeCpu: CpuSpent = { daemon: [], sim: [] };
  const daemonPid = rig.daemon.child.pid;
  const connect: number[] = [];
  let desired = 0;
  const endedBefore = sessionsEnded(rig.daemon);
  for (let r = 0; r < opts.snapshots; r++) {
    const t0 = process.hrtime.bigint();
    const daemonCpu0 = cpuOf(daemonPid);
    const sim = rig.startSim(r);
    try {
      connect.push(
        await msUntilHeld(sim, t0, (s) => s.session.state === 'connected', `${label}: connected`, reads),
      );
      snap.held.push(
        await msUntilHeld(
          sim,
          t0,
          (s) => s.synced && (s.fabric?.length ?? 0) >= 2 * PEERS,
          `${label}: snapshot held`,
          reads,
        ),
      );
      snap.acked.push(
        await msUntilRow(rig.daemon, t0, allAcked(2 * PEERS), `${label}: snapshot acknowledged`, calls, 100),
      );
      snapCpu.daemon.push(cpuOf(daemonPid) - daemonCpu0);
      snapCpu.sim.push(cpuOf(sim.child.pid));
      desired = (await dpuRow(rig.daemon)).row?.fabric?.objectsDesired ?? 0;
      if (r === opts.snapshots - 1) {
        // The host port takes a route per peer range: at 5,000 peers one write of them all was more
        // than the kernel takes, and the port never attached.
        const hostPort = await hostPortOf(rig.daemon);
        add(
          `${label}: host port with ${PEERS} peers: routes through it (${hostPort.state || 'absent'})`,
          hostPort.routes,
          'routes',
        );
        // (b) One peer change at a time: the file written (renamed into place) → the simulator holds
        // it → the daemon counts the changed desired set acknowledged.
        const byKind: Record<string, Timings> = { add: timings(), change: timings(), remove: timings() };
        for (let i = 0; i < opts.rounds; i++)
          for (const c of changePeer(i)) {
            const cpu0 = { daemon: cpuOf(daemonPid), sim: cpuOf(sim.child.pid) };
            // Timed from the file renamed into place (making its megabyte of text here is not the
            // daemon's time).
            writePeersFile(rig.peersFile, [...base, ...c.peers]);
            const t1 = process.hrtime.bigint();
            const landings = watchLandings(sim, t1);
            const k = byKind[c.label] as Timings;
            const acked = await msUntilRow(
              rig.daemon,
              t1,
              allAcked(0, desired + c.delta),
              `${label}: peer ${c.label} acknowledged`,
              calls,
              20,
            );
            changeCpu.daemon.push(cpuOf(daemonPid) - cpu0.daemon);
            changeCpu.sim.push(cpuOf(sim.child.pid) - cpu0.sim);
            const landed = landings.stop().filter((ms) => ms <= acked);
            // The simulator acks right after its write lands: the last write seen before the daemon
            // counted the ack is the one holding the change (checked: the file holds it).
            const read = await msUntilHeld(
              sim,
              t1,
              (s) => c.held(names(s)),
              `${label}: peer ${c.label} held`,
              reads,
            );
            k.acked.push(acked);
            k.held.push(landed.at(-1) ?? read);
          }
        const all = (w: keyof Timings): number[] => Object.values(byKind).flatMap((k) => k[w]);
        const n = all('held').length;
        for (const [w, what] of [
          ['held', 'held by the simulator (its state file; it acks right after)'],
          ['acked', 'acknowledged per the daemon (Status)'],
        ] as const) {
          add(`${label}: one peer change → ${what}, ${n} changes, p50`, percentile(all(w), 50), 'ms');
          add(`${label}: one peer change → ${what}, ${n} changes, p95`, percentile(all(w), 95), 'ms');
        }
        for (const [who, list] of Object.entries(changeCpu) as Array<[string, number[]]>)
          add(
            `${label}: one peer change → acknowledged, CPU of the ${who}, p50 (${n})`,
            percentile(list, 50),
            'ms',
          );
        for (const [kind, k] of Object.entries(byKind)) {
          const what = `peer ${kind} → held by the simulator (${k.held.length})`;
          add(`${label}: ${what}, p50`, percentile(k.held, 50), 'ms');
          add(`${label}: ${what}, p95`, percentile(k.held, 95), 'ms');
        }
      }
    } finally {
      await sim.stop('SIGKILL');
      // The daemon must have seen this session end before the next starts (acks of an earlier session
      // never count, but until then the row would still say connected).
      await msUntilRow(rig.daemon, process.hrtime.bigint(), (row) => !row.connected, 'agent gone', [], 250);
    }
  }
  const n = snap.held.length;
  // Each round ends its session once (the kill); any more were dropped and restarted while measured.
  add(
    `${label}: agent sessions that ended while measured, beyond the ${n} killed`,
    sessionsEnded(rig.daemon) - endedBefore - n,
    'sessions',
  );
  add(`${label}: fabric objects desired for the DPU with ${PEERS} peers`, desired, 'objects');
  add(`${label}: snapshot, simulator spawned → session connected, p50 (${n})`, percentile(connect, 50), 'ms');
  add(`${label}: snapshot, spawned → all held by the simulator, p50 (${n})`, percentile(snap.held, 50), 'ms');
  add(`${label}: snapshot, spawned → all held by the simulator, max`, Math.max(...snap.held), 'ms');
  add(
    `${label}: snapshot, spawned → all acknowledged per the daemon, p50 (${n})`,
    percentile(snap.acked, 50),
    'ms',
  );
  add(`${label}: snapshot, spawned → all acknowledged per the daemon, max`, Math.max(...snap.acked), 'ms');
  const connectToAcked = snap.acked.map((a, i) => a - (connect[i] ?? 0));
  add(
    `${label}: snapshot, session connected → all acknowledged, p50 (${n})`,
    percentile(connectToAcked, 50),
    'ms',
  );
  for (const [who, list] of Object.entries(snapCpu) as Array<[string, number[]]>)
    add(
      `${label}: snapshot, spawned → all acknowledged, CPU of the ${who}, p50 (${n})`,
      percentile(list, 50),
      'ms',
    );
  add(`${label}: quantisation: Status call while polling, p50`, percentile(calls, 50), 'ms');
  add(`${label}: quantisation: Status call while polling, p95`, percentile(calls, 95), 'ms');
  add(`${label}: quantisation: state file read and parsed, p50`, percentile(reads, 50), 'ms');
}

export async function benchDpuFabric(opts: {
  /** Rounds of one peer added, given a second prefix and removed (3 changes each). */
  rounds: number;
  snapshots: number;
  modes?: Mode[];
}): Promise<FabricBenchRow[]> {
  const rows: FabricBenchRow[] = [];
  const add = (name: string, value: number, unit: string): void => {
    rows.push({ name, value: round(value), unit });
  };
  const modes = opts.modes ?? ['none', 'netns'];
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-dpu-fabric-bench-'));
  const topo = new FabricTopology();
  let daemon: DaemonProcess | undefined;
  try {
    await topo.build([]);
    for (const mode of modes) {
      const dir = path.join(root, mode);
      fs.mkdirSync(dir);
      const peersFile = path.join(dir, 'peers.json');
      writePeersFile(peersFile, syntheticPeers(PEERS, '10.120'));
      // The daemon's (host's) namespace; in netns mode the VFs' host ends appear there.
      const host = topo.pool.add(`dfh${mode === 'none' ? 'n' : 'k'}`).name;
      await ip('-n', host, 'link', 'set', 'lo', 'up');
      // netns mode: the DPU's namespace on the underlay, its default-route interface the uplink.
      const dpu =
        mode === 'netns' ? await topo.addBareNode({ name: 'dfdpu', subnet: 1, host: 21 }) : undefined;
      daemon = await startDaemon(dir, host, peersFile);
      const d = daemon;
      const rig: Rig = {
        daemon: d,
        peersFile,
        dir,
        startSim: (boot) =>
          SimProcess.start({
            socket: path.join(dir, 'agent.sock'),
            agentId: AGENT,
            bootId: `bench-boot-${boot}`,
            stateFile: path.join(dir, 'sim.json'),
            // Logging each of 10,000 objects at debug would be most of the simulator's work.
            extra: [
              '--log-level',
              'warn',
              ...(dpu
                ? ['--dataplane', 'netns', '--dpu-netns', dpu.ns, '--host-netns', netnsPath(host)]
                : ['--vtep-address', '10.99.0.2']),
            ],
          }),
      };
      // A mode that fails (a stalled snapshot) is reported as such; the other mode's figures and the
      // rest of the fabric section still count.
      await measure(rig, mode, opts, add).catch((err: unknown) => {
        const message = err instanceof Error ? err.message : String(err);
        console.error(`dpu fabric bench, ${mode}: ${message}`);
        rows.push({
          name: `${mode}: failed: ${message.split('\n')[0]?.slice(0, 200)}`,
          value: NaN,
          unit: '',
        });
      });
      await d.stop();
      daemon = undefined;
    }
    return rows;
  } finally {
    await daemon?.stop().catch(() => undefined);
    await topo.cleanup();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

if (require.main === module) {
  const rounds = Number(process.argv[2] ?? 10);
  const snapshots = Number(process.argv[3] ?? 3);
  const which = process.argv[4] ?? 'both';
  const modes: Mode[] = which === 'both' ? ['none', 'netns'] : [which as Mode];
  printRowsAndExit(benchDpuFabric({ rounds, snapshots, modes }));
}
