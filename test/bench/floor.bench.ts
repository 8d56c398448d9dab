import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fsSync from 'node:fs';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnInNetns } from '../e2e/support/spawn-in-netns';
import { nativeTool } from './native-tool';
import { percentile } from './stats';
import { childOutput } from '../support/child-output';
import { trackNetns, untrackNetns } from '../support/netns-leftovers';
import type { OpRow } from './op-row';

// The floor: what the Linux backend's kernel work costs with nothing else around it. netlink-floor.c
// sends, per workload, the same rtnetlink messages in the same writes on sockets in the same
// namespaces as the backend, synchronously from one C process running in a test-owned node namespace;
// the workload namespaces are created beforehand (not timed) and everything is deleted afterwards.
// Every other row of the benchmark is compared with it.
//
//   node dist/test/bench/floor.bench.js [count] [parallel]

/** A floor row; its CPU is the floor process's. */
export type FloorRow = OpRow;

export const FLOOR_ROW_NAME = 'floor: same netlink messages from C';

/** The floor's attach, step by step (netlink-floor.c with NETLINK_FLOOR_STEPS=1): p50 of each, µs. */
export const FLOOR_STEPS = [
  'open + check the namespace',
  'socket in the namespace + options',
  'create the veth pair (echo + ACK)',
  'workload side (one write)',
  'host side (one write)',
  'alias',
  'close',
] as const;

export interface FloorResult {
  rows: FloorRow[];
  /** p50 per FLOOR_STEPS entry over the sequential attaches, µs. */
  attachStepsP50Us: number[];
  /**
   * Sequential attach p50 with the CPU caches evicted before each one (16 MiB written): the floor as a
   * process meets it when other work runs between its attaches, as in the daemon.
   */
  coldAttachP50Ms: number;
}
const PREFIX = 'wnb-floor-';

function ipBatch(commands: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = execFile('ip', ['-batch', '-'], (err, _out, stderr) =>
      err ? reject(new Error(`ip -batch: ${stderr.trim() || err.message}`)) : resolve(),
    );
    child.stdin?.end(commands.join('\n') + '\n');
  });
}

interface PhaseOut {
  steps?: number[][];
  lat: number[];
  wallMs: number;
  userMs: number;
  sysMs: number;
}

function parse(out: string): Map<string, PhaseOut> {
  const phases = new Map<string, PhaseOut>();
  const get = (name: string): PhaseOut => {
    let p = phases.get(name);
    if (!p) phases.set(name, (p = { lat: [], wallMs: NaN, userMs: NaN, sysMs: NaN }));
    return p;
  };
  for (const line of out.trim().split('\n')) {
    const [kind, name, a, b, c] = line.split(' ');
    if (!name) continue;
    if (kind === 'lat') get(name).lat[Number(a)] = Number(b) / 1000;
    else if (kind === 'step') (get('steps').steps ??= []).push(line.split(' ').slice(2).map(Number));
    else if (kind === 'phase') {
      const p = get(name);
      p.wallMs = Number(a) / 1000;
      p.userMs = Number(b) / 1000;
      p.sysMs = Number(c) / 1000;
    }
  }
  return phases;
}

export async function benchFloor(opts: { count: number; parallel: number }): Promise<FloorResult> {
  if (opts.count < 1 || opts.parallel < 1) throw new Error('count and parallel must be at least 1');
  const bin = await nativeTool('netlink-floor', ['-pthread']);
  const tag = randomBytes(3).toString('hex');
  const node = `${PREFIX}${tag}-node`;
  const workloads = Array.from({ length: opts.count }, (_, i) => `${PREFIX}${tag}-${i}`);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'wn-floor-'));
  const created: string[] = [];
  try {
    for (const batch of [[node], workloads]) {
      await ipBatch(batch.map((n) => `netns add ${n}`));
      created.push(...batch);
      trackNetns(...batch);
    }
    const pathsFile = path.join(dir, 'paths');
    await fs.writeFile(pathsFile, workloads.map((n) => `/var/run/netns/${n}\n`).join(''));
    const run = await childOutput(
      spawnInNetns(`/var/run/netns/${node}`, bin, [String(opts.count), String(opts.parallel), pathsFile], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, NETLINK_FLOOR_STEPS: '1' },
      }),
    );
    if (run.code !== 0) throw new Error(`netlink-floor exited ${run.code}: ${run.stderr.trim()}`);
    const out = run.stdout;
    const phases = parse(out);
    const row = (op: 'attach' | 'detach'): FloorRow => {
      const seq = phases.get(`${op}-seq`);
      const par = phases.get(`${op}-par`);
      if (!seq || !par) throw new Error(`netlink-floor reported no ${op} phases:\n${out.slice(0, 500)}`);
      return {
        name: FLOOR_ROW_NAME,
        op,
        p50Ms: percentile(seq.lat, 50),
        p99Ms: percentile(seq.lat, 99),
        perSecondAtParallel: opts.count / (par.wallMs / 1000),
        cpuMsPerOp: (par.userMs + par.sysMs) / opts.count,
        cpuSysMsPerOp: par.sysMs / opts.count,
      };
    };
    const steps = phases.get('steps')?.steps ?? [];
    const cold = phases.get('attach-cold');
    if (!cold) throw new Error(`netlink-floor reported no attach-cold phase:\n${out.slice(0, 500)}`);
    return {
      rows: [row('attach'), row('detach')],
      coldAttachP50Ms: percentile(cold.lat, 50),
      attachStepsP50Us: FLOOR_STEPS.map((_, k) =>
        percentile(
          steps.map((st) => st[k] ?? NaN),
          50,
        ),
      ),
    };
  } finally {
    // Deleting the namespaces takes any pair left by a failed run with them.
    untrackNetns(...created);
    if (created.length > 0) await ipBatch(created.reverse().map((n) => `netns delete ${n}`)).catch(() => {});
    await fs.rm(dir, { recursive: true, force: true });
  }
}

/**
 * The other floor of a durable attach: one disk flush (pwrite of 4 KiB + fdatasync) in `dir`, the
 * filesystem the daemon's store lives on in this benchmark (an lmdb commit is a data write, a flush
 * and a synchronous meta-page write). Synchronous calls: nothing else runs meanwhile. p50 in ms.
 */
export function benchDiskFlush(dir: string = os.tmpdir(), count = 100): number {
  const file = path.join(dir, `wn-flush-${randomBytes(3).toString('hex')}`);
  const fd = fsSync.openSync(file, 'w');
  try {
    const page = Buffer.alloc(4096, 1);
    const ms: number[] = [];
    for (let i = 0; i < count; i++) {
      const t = process.hrtime.bigint();
      fsSync.writeSync(fd, page, 0, page.length, (i % 16) * 4096);
      fsSync.fdatasyncSync(fd);
      ms.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
    return percentile(ms, 50);
  } finally {
    fsSync.closeSync(fd);
    fsSync.rmSync(file, { force: true });
  }
}

if (require.main === module) {
  const count = Number(process.argv[2] ?? 100);
  const parallel = Number(process.argv[3] ?? 16);
  benchFloor({ count, parallel }).then(
    ({ rows, attachStepsP50Us, coldAttachP50Ms }) => {
      console.log(
        `count=${count} parallel=${parallel}; one disk flush p50 ${benchDiskFlush().toFixed(3)} ms`,
      );
      console.table(
        rows.map((r) => ({
          op: r.op,
          p50Ms: +r.p50Ms.toFixed(3),
          p99Ms: +r.p99Ms.toFixed(3),
          perSecondAtParallel: Math.round(r.perSecondAtParallel),
          cpuMsPerOp: +r.cpuMsPerOp.toFixed(3),
          cpuSysMsPerOp: +r.cpuSysMsPerOp.toFixed(3),
        })),
      );
      console.log(
        `floor attach steps, p50 µs: ${FLOOR_STEPS.map((s, k) => `${s} ${attachStepsP50Us[k]}`).join('; ')}`,
      );
      console.log(
        `floor attach p50 with the CPU caches evicted before each: ${coldAttachP50Ms.toFixed(3)} ms`,
      );
    },
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
