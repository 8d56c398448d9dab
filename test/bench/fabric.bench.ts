// The fabric between nodes: how fast a peer that joins the static peer source is reachable and one that
// leaves is gone, how long 2,000 peers take to be programmed and removed and what they cost the daemon
// in memory, and what the fabric costs the attach path. Real daemons (dist/cli/workloadnet.js) in node
// namespaces of the fabric tests' underlay (test/support/fabric-topology.ts): na and nb on one
// subnet (a direct route between them in hybrid mode), nc behind the router (VXLAN). Figures are
// reported against the targets, never asserted: the machines are shared.
// Run alone with: node dist/test/bench/fabric.bench.js [repetitions]

import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { vtepMac } from '../../lib/vtep-mac';
import {
  FabricTopology,
  bridge,
  peersFileEntry,
  writePeersFile,
  type BareNode,
  type PeersFileEntry,
} from '../support/fabric-topology';
import { ip } from '../support/netns-fixture';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { percentile, timeMs } from './stats';
import { printRowsAndExit } from './bench-main';

export interface FabricBenchRow {
  name: string;
  value: number;
  unit: string;
}

const SYNTHETIC_PEERS = 2000;

interface Node extends BareNode {
  range: number;
  dir: string;
  peersFile: string;
  daemon?: DaemonProcess;
  pod?: string;
  podIp?: string;
}

const nodeEntry = (n: Node): PeersFileEntry => peersFileEntry(n.name, n.address, [`10.244.${n.range}.0/24`]);

/**
 * `count` peers that exist only in the file: distinct underlay addresses in `underlayBase`.0.0/16 and one
 * /26 each from 10.128.0.0/10 (nothing answers there; the daemon programs them all the same).
 */
export function syntheticPeers(count: number, underlayBase: string): PeersFileEntry[] {
  return Array.from({ length: count }, (_, i) => {
    const a = `${underlayBase}.${Math.floor(i / 250)}.${(i % 250) + 1}`;
    const p = 0x0a800000 + i * 64; // 10.128.0.0 + i /26s
    const prefix = [p >>> 24, (p >>> 16) & 255, (p >>> 8) & 255, p & 255].join('.');
    return peersFileEntry(`syn-${i}`, a, [`${prefix}/26`]);
  });
}

function writePeers(n: Node, peers: PeersFileEntry[]): void {
  writePeersFile(n.peersFile, peers);
}

async function fabricRoutes(ns: string): Promise<string[]> {
  return (await ip('-n', ns, 'route', 'show', 'proto', '119')).split('\n').filter((l) => l.trim() !== '');
}

/** Lines of our VXLAN device's FDB and permanent neighbours that mention `mac` or `address`. */
async function vxlanEntries(ns: string, mac: string, address: string): Promise<number> {
  const neigh = await ip('-n', ns, 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent').catch(() => '');
  const fdb = await bridge(ns, 'fdb', 'show', 'dev', 'wn-vxlan').catch(() => '');
  return [...neigh.split('\n'), ...fdb.split('\n')].filter((l) => l.includes(mac) || l.includes(address))
    .length;
}

async function vxlanCounts(ns: string): Promise<{ neigh: number; fdb: number }> {
  const count = (s: string): number => s.split('\n').filter((l) => l.trim() !== '').length;
  const neigh = await ip('-n', ns, 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent').catch(() => '');
  const fdb = await bridge(ns, 'fdb', 'show', 'dev', 'wn-vxlan').catch(() => '');
  return {
    neigh: count(neigh),
    fdb: count(
      fdb
        .split('\n')
        .filter((l) => / dst /.test(l))
        .join('\n'),
    ),
  };
}

/** Polls `done` every few ms until it holds; the time from `t0` (hrtime ns) to the poll that saw it. */
async function msUntil(
  t0: bigint,
  done: () => Promise<boolean>,
  what: string,
  timeoutMs = 60_000,
): Promise<number> {
  for (;;) {
    if (await done()) return Number(process.hrtime.bigint() - t0) / 1e6;
    if (Number(process.hrtime.bigint() - t0) / 1e6 > timeoutMs)
      throw new Error(`fabric bench: ${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Pings `to` from `ns` every 10 ms until the first answer (or `deadlineS`); resolves with the time from
 * `t0` (hrtime ns) to that answer. ping(8) with `-c 1` also ends on its first ICMP error (an
 * unreachable while the neighbour is resolved or the route is still being changed), which is no
 * verdict yet: it is started again until the deadline.
 */
async function firstReplyMs(t0: bigint, ns: string, to: string, deadlineS = 30): Promise<number> {
  const elapsedS = (): number => Number(process.hrtime.bigint() - t0) / 1e9;
  for (;;) {
    const left = Math.max(1, Math.ceil(deadlineS - elapsedS()));
    const args = ['netns', 'exec', ns, 'ping', '-q', '-n', '-i', '0.01', '-c', '1', '-w', String(left), to];
    const failed = await new Promise<string | undefined>((resolve) =>
      execFile('ip', args, (err, stdout, stderr) => resolve(err === null ? undefined : `${stdout}${stderr}`)),
    );
    if (failed === undefined) return Number(process.hrtime.bigint() - t0) / 1e6;
    if (elapsedS() >= deadlineS) throw new Error(`fabric bench: no answer from ${to} in ${ns}: ${failed}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

const round = (n: number, digits = 1): number => Number(n.toFixed(digits));

async function startDaemon(n: Node, fabric: 'hybrid' | 'off', dir = n.dir): Promise<DaemonProcess> {
  // Grace 0: a peer that leaves the file is removed at once, which is what "leave" measures here
  // (by default it stays programmed for fabric.withdrawGraceSeconds, 180 s).
  const config = path.join(dir, 'config.json');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(config, JSON.stringify({ fabric: { withdrawGraceSeconds: 0 } }));
  return DaemonProcess.start({
    dir,
    netns: n.ns,
    flags: {
      config,
      'log-level': 'info',
      'pod-cidr': `10.244.${n.range}.0/24`,
      mtu: '1450',
      fabric,
      ...(fabric === 'off' ? {} : { 'peers-file': n.peersFile }),
    },
  });
}

/** Join → first reply and leave → entries gone for one peer of na, `reps` times. */
async function joinLeave(
  na: Node,
  peer: Node,
  base: PeersFileEntry[],
  reps: number,
  vxlan: boolean,
): Promise<{ join: number[]; routed: number[]; leave: number[]; cold: number }> {
  const join: number[] = [];
  const routed: number[] = [];
  const leave: number[] = [];
  const prefix = `10.244.${peer.range}.0/24`;
  const hasRoute = async (): Promise<boolean> =>
    (await fabricRoutes(na.ns)).some((l) => l.startsWith(prefix));
  const mac = vtepMac(peer.address);
  for (let i = 0; i <= reps; i++) {
    const t0 = process.hrtime.bigint();
    writePeers(na, [...base, nodeEntry(peer)]);
    const reply = firstReplyMs(t0, na.pod as string, peer.podIp as string);
    routed.push(await msUntil(t0, hasRoute, `${peer.name} routed`));
    join.push(await reply);
    const t1 = process.hrtime.bigint();
    writePeers(na, base);
    leave.push(
      await msUntil(
        t1,
        async () => !(await hasRoute()) && (!vxlan || (await vxlanEntries(na.ns, mac, peer.address)) === 0),
        `${peer.name} gone`,
      ),
    );
  }
  // The first join is the first contact between the two nodes (neighbour caches cold on both sides):
  // reported alone, the way every other row leaves its first round out.
  const cold = join.shift() ?? NaN;
  routed.shift();
  leave.shift();
  return { join, routed, leave, cold };
}

/** Sequential attach latencies (ms) of `netns.length` pods, then all detached (untimed). */
async function attachP50(d: DaemonProcess, netns: string[], rounds: number, tag: string): Promise<number[]> {
  const c = d.client;
  const ms: number[] = [];
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < netns.length; i++)
      ms.push(await timeMs(() => c.call(c.raw.attach, attachRequest(`${tag}-${r}-${i}`, netns[i] ?? ''))));
    for (let i = 0; i < netns.length; i++)
      await c.call(c.raw.detach, { workloadId: `${tag}-${r}-${i}`, netns: undefined });
  }
  return ms;
}

export async function benchFabric(opts: { reps: number; attaches?: number }): Promise<FabricBenchRow[]> {
  const rows: FabricBenchRow[] = [];
  const add = (name: string, value: number, unit: string): void => {
    rows.push({ name, value: round(value, unit === 'ratio' ? 2 : 1), unit });
  };
  const topo = new FabricTopology();
  const nodes: Node[] = [];
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabric-bench-'));
  try {
    await topo.build([]);
    for (const [name, subnet, host, range] of [
      ['na', 1, 1, 1],
      ['nb', 1, 2, 2],
      ['nc', 2, 3, 3],
    ] as const) {
      const bare = await topo.addBareNode({ name, subnet, host });
      const dir = path.join(root, name);
      fs.mkdirSync(dir);
      nodes.push({ ...bare, range, dir, peersFile: path.join(dir, 'peers.json') });
    }
    const [na, nb, nc] = nodes as [Node, Node, Node];
    // nb and nc know na throughout; na starts knowing nobody.
    writePeers(na, []);
    writePeers(nb, [nodeEntry(na), nodeEntry(nc)]);
    writePeers(nc, [nodeEntry(na), nodeEntry(nb)]);
    for (const n of nodes) {
      n.daemon = await startDaemon(n, 'hybrid');
      const pod = topo.pool.add(`${n.name}pod`);
      const res = await n.daemon.client.call(
        n.daemon.client.raw.attach,
        attachRequest(`${n.name}-pod`, pod.path),
      );
      n.pod = pod.name;
      n.podIp = (res.ips[0]?.cidr ?? '').split('/')[0];
    }

    // 1. Join → first reply, leave → entries gone: the direct path (nb) and the VXLAN path (nc). The
    // other node stays listed throughout: a source that lists no peer at all stops withdrawals
    // (docs/fabric.md), so a peer leaving an otherwise empty file would never be gone.
    for (const [label, peer, other, vxlan] of [
      ['direct', nb, nc, false],
      ['vxlan', nc, nb, true],
    ] as const) {
      const { join, routed, leave, cold } = await joinLeave(na, peer, [nodeEntry(other)], opts.reps, vxlan);
      add(
        `first join → first reply, ${label} (hybrid; cold neighbour caches, not in the p50/p95)`,
        cold,
        'ms',
      );
      add(`join → route programmed, ${label} (hybrid), p50`, percentile(routed, 50), 'ms');
      add(`join → first reply, ${label} (hybrid), p50`, percentile(join, 50), 'ms');
      add(`join → first reply, ${label} (hybrid), p95`, percentile(join, 95), 'ms');
      add(`leave → entries gone, ${label} (grace 0), p50`, percentile(leave, 50), 'ms');
      add(`leave → entries gone, ${label} (grace 0), p95`, percentile(leave, 95), 'ms');
    }

    // 2. 2,000 synthetic peers from the file: VXLAN peers (underlay off na's subnet), then direct ones
    // (underlay on a /16 added to na's uplink, so that each is directly connected).
    await ip('-n', na.ns, 'addr', 'add', '10.101.0.1/16', 'dev', 'eth0');
    const base = [nodeEntry(nb), nodeEntry(nc)];
    writePeers(na, base);
    await msUntil(process.hrtime.bigint(), async () => (await fabricRoutes(na.ns)).length >= 2, 'base peers');
    const baseRoutes = (await fabricRoutes(na.ns)).length;
    const pid = na.daemon?.child.pid ?? 0;
    for (const [label, underlay, vxlan] of [
      ['vxlan', '10.120', true],
      ['direct', '10.101', false],
    ] as const) {
      const rssBefore = rssMiB(pid);
      const t0 = process.hrtime.bigint();
      writePeers(na, [...base, ...syntheticPeers(SYNTHETIC_PEERS, underlay)]);
      const up = await msUntil(
        t0,
        async () =>
          (await fabricRoutes(na.ns)).length >= baseRoutes + SYNTHETIC_PEERS &&
          (!vxlan || (await vxlanCounts(na.ns)).neigh >= SYNTHETIC_PEERS + 1),
        `${SYNTHETIC_PEERS} ${label} peers programmed`,
        120_000,
      );
      const rssAfter = rssMiB(pid);
      const t1 = process.hrtime.bigint();
      writePeers(na, base);
      const down = await msUntil(
        t1,
        async () =>
          (await fabricRoutes(na.ns)).length <= baseRoutes &&
          (!vxlan || (await vxlanCounts(na.ns)).neigh <= 1),
        `${SYNTHETIC_PEERS} ${label} peers removed`,
        120_000,
      );
      add(`${SYNTHETIC_PEERS} ${label} peers: file written → all programmed`, up, 'ms');
      add(`${SYNTHETIC_PEERS} ${label} peers: file emptied → all removed (grace 0)`, down, 'ms');
      add(`${SYNTHETIC_PEERS} ${label} peers: daemon RSS before`, rssBefore, 'MiB');
      add(`${SYNTHETIC_PEERS} ${label} peers: daemon RSS with them programmed`, rssAfter, 'MiB');
      add(`${SYNTHETIC_PEERS} ${label} peers: daemon RSS growth`, rssAfter - rssBefore, 'MiB');
    }

    // 3. Attach with the fabric on (hybrid, nb and nc) against off: the same build in the same node
    // namespace, a fresh state directory each time, alternated so that neither always runs second.
    // na's own pod goes first, so that the fresh daemons below find no attachment they do not know.
    await na.daemon?.client.call(na.daemon.client.raw.detach, { workloadId: 'na-pod', netns: undefined });
    await na.daemon?.stop();
    na.daemon = undefined;
    const pods = topo.pool.addMany(opts.attaches ?? 20, 'att').map((x) => x.path);
    const p50s: Record<'on' | 'off', number[]> = { on: [], off: [] };
    for (let r = 0; r < 3; r++)
      for (const mode of r % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
        const d = await startDaemon(
          na,
          mode === 'on' ? 'hybrid' : 'off',
          path.join(root, `att-${mode}-${r}`),
        );
        try {
          await attachP50(d, pods, 3, 'warm');
          p50s[mode].push(percentile(await attachP50(d, pods, 5, 'timed'), 50));
        } finally {
          await d.stop();
        }
      }
    const med = (xs: number[]): number => percentile(xs, 50);
    add('attach p50, fabric off (daemon, linux backend)', med(p50s.off), 'ms');
    add('attach p50, fabric on (hybrid, 2 peers)', med(p50s.on), 'ms');
    add('attach p50 fabric on / off', med(p50s.on) / med(p50s.off), 'ratio');
    // Each daemon's own p50, in the order they ran (off, on, on, off, off, on): how much one run moves.
    p50s.off.forEach((v, i) => add(`attach p50, fabric off, daemon ${i + 1} of ${p50s.off.length}`, v, 'ms'));
    p50s.on.forEach((v, i) => add(`attach p50, fabric on, daemon ${i + 1} of ${p50s.on.length}`, v, 'ms'));
    return rows;
  } finally {
    for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
    topo.cleanup();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

if (require.main === module) {
  const reps = Number(process.argv[2] ?? 20);
  printRowsAndExit(benchFabric({ reps }));
}
