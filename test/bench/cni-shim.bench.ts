import { execFile, spawn } from 'node:child_process';
import { promises as fs } from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { CniServer } from '../../adapters/cni/cni-server';
import { buildShim } from '../support/cni-harness';
import { NetnsSet } from '../support/netns';
import { FakeWorkloadService } from './fake-workload-service';

// The CNI forwarder's round trip, against the real CniServer with an in-memory service so that only the
// adapter path is measured: exec of the forwarder, HTTP over the unix socket, the handler, the answer.
// The forwarder is exec'd from a bash loop rather than from Node, because Node's own child_process
// bookkeeping (~10 ms a spawn on these machines) would dwarf what is measured; bash's fork+exec is close
// to what a Go runtime pays. Two baselines sit beside it: exec of a static no-op binary from the same loop
// (what any exec'd plugin pays before doing anything), and the same request sent by Node without the forwarder
// (the daemon's side of the work).

const execFileP = promisify(execFile);

export interface BenchRow {
  name: string;
  p50Ms: number;
  p99Ms: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return Math.round((sorted[idx] ?? Number.NaN) * 1000) / 1000;
}

function row(name: string, samples: number[]): BenchRow {
  const sorted = [...samples].sort((a, b) => a - b);
  return { name, p50Ms: percentile(sorted, 0.5), p99Ms: percentile(sorted, 0.99) };
}

function postDirect(socketPath: string, body: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { socketPath, method: 'POST', path: '/v1/cni', headers: { Connection: 'close' } },
      (res) => {
        res.resume();
        res.on('end', () => resolve());
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

// Each iteration prints the $EPOCHREALTIME stamps around the timed commands; no fork per stamp.
// The four timed commands are interleaved in one loop so that load from elsewhere on the machine
// affects them alike.
const DRIVER = `#!/bin/bash
n=$1 shim=$2 stdin=$3 ns=$4
export CNI_NETNS="$ns" CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=bench"
for ((i = 0; i < n; i++)); do
  export CNI_CONTAINERID="bench$i"
  t0=$EPOCHREALTIME; "$shim.noop"
  t1=$EPOCHREALTIME; CNI_COMMAND=VERSION "$shim" <"$stdin" >/dev/null || exit 1
  t2=$EPOCHREALTIME; CNI_COMMAND=ADD "$shim" <"$stdin" >/dev/null || exit 1
  t3=$EPOCHREALTIME; CNI_COMMAND=DEL "$shim" <"$stdin" >/dev/null || exit 1
  t4=$EPOCHREALTIME
  echo "$t0 $t1 $t2 $t3 $t4"
done
`;

/** Run the driver asynchronously (the server lives in this process) and return per-step durations in ms. */
function drive(driver: string, args: string[]): Promise<number[][]> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [driver, ...args], {
      env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const out: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) {
        reject(new Error(`bench driver exited with ${code ?? 'a signal'}`));
        return;
      }
      const lines = Buffer.concat(out).toString('utf8').trim().split('\n');
      resolve(
        lines.map((line) => {
          const stamps = line.split(' ').map(Number);
          return stamps.slice(1).map((t, i) => (t - (stamps[i] ?? t)) * 1000);
        }),
      );
    });
  });
}

/** `shim`: a prebuilt forwarder to measure instead of building this tree's (to compare two builds). */
export async function benchCniShim(opts: { count: number; shim?: string }): Promise<BenchRow[]> {
  const count = Math.max(1, opts.count);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'wnc-bench-'));
  const netns = new NetnsSet('wnc-bench-');
  const socketPath = path.join(dir, 'cni.sock');
  const server = new CniServer(new FakeWorkloadService(), { socketPath });
  try {
    const shim = opts.shim ? path.join(dir, 'workloadnet-cni') : await buildShim(dir);
    if (opts.shim) await fs.copyFile(opts.shim, shim);
    // The path a runtime passes (/run, not the /var/run symlink), as this benchmark has always measured.
    const ns = `/run/netns/${netns.add().name}`;
    await server.listen();
    const config = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'wnc-bench',
      type: 'workloadnet',
      socket: socketPath,
    });
    // The process-start baseline is built like the forwarder (static, -O2, stripped) so that the
    // difference between the two is the forwarder's own work.
    const noopSource = path.join(dir, 'noop.c');
    await fs.writeFile(noopSource, 'int main(void) { return 0; }\n');
    await execFileP('cc', ['-O2', '-static', '-s', '-o', `${shim}.noop`, noopSource]).catch(() =>
      execFileP('cc', ['-O2', '-s', '-o', `${shim}.noop`, noopSource]),
    );
    const stdinFile = path.join(dir, 'stdin.json');
    await fs.writeFile(stdinFile, config);
    const driver = path.join(dir, 'driver.sh');
    await fs.writeFile(driver, DRIVER);

    // Warm up the page cache, the JIT and the socket path.
    await drive(driver, ['10', shim, stdinFile, ns]);
    const steps = await drive(driver, [String(count), shim, stdinFile, ns]);
    const step = (n: number): number[] => steps.map((d) => d[n] ?? Number.NaN);
    // Paired per iteration: the forwarder's cost beyond starting any static process.
    const overhead = (n: number): number[] => steps.map((d) => (d[n] ?? Number.NaN) - (d[0] ?? Number.NaN));
    const direct: number[] = [];
    const directBody = JSON.stringify({ env: { CNI_COMMAND: 'VERSION' }, stdin: config });
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      await postDirect(socketPath, directBody);
      direct.push(performance.now() - t0);
    }
    return [
      // VERSION is answered by the forwarder itself: exec and a local answer, no daemon round trip.
      row('cni-shim VERSION (exec, answered by the forwarder)', step(1)),
      row('cni-shim ADD (exec + round trip, fake service)', step(2)),
      row('cni-shim DEL (exec + round trip, fake service)', step(3)),
      row('baseline: exec a static no-op binary', step(0)),
      row('forwarder overhead over the no-op exec: VERSION', overhead(1)),
      row('forwarder overhead over the no-op exec: ADD', overhead(2)),
      row('baseline: VERSION request to the daemon from Node, no forwarder', direct),
    ];
  } finally {
    await server.close();
    netns.cleanup();
    await fs.rm(dir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  // node dist/test/bench/cni-shim.bench.js [count] [prebuilt forwarder]
  const shim = process.argv[3];
  benchCniShim({ count: Number(process.argv[2] ?? 200), ...(shim ? { shim: path.resolve(shim) } : {}) }).then(
    (rows) => console.table(rows),
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
