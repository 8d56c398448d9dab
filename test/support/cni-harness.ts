import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';

// Shared by the CNI tests and the shim benchmark: build the real forwarder and run it like a runtime
// does.

const execFileP = promisify(execFile);

export function repoRoot(): string {
  // Runs from test/… under tsx and from dist/test/… once compiled: walk up to the folder with the shim.
  let dir = __dirname;
  while (!existsSync(path.join(dir, 'adapters', 'cni', 'shim', 'build.sh'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`cannot find adapters/cni/shim/build.sh above ${__dirname}`);
    dir = up;
  }
  return dir;
}

/** Build the forwarder with the project's build script; returns the binary's path. */
export async function buildShim(outDir: string): Promise<string> {
  const out = path.join(outDir, 'workloadnet-cni');
  await execFileP('sh', [path.join(repoRoot(), 'adapters', 'cni', 'shim', 'build.sh'), out]);
  return out;
}

export interface ShimRun {
  exitCode: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Run the forwarder the way a runtime does: a fresh environment holding only what is given (plus PATH),
 * the config on stdin.
 */
export function runShim(shim: string, env: Record<string, string>, stdin: string): Promise<ShimRun> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(shim, [], { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', ...env }, stdio: 'pipe' });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({
        exitCode: code ?? -1,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        ms: performance.now() - started,
      }),
    );
    // A forwarder that exits early (daemon unreachable) closes its stdin; that is not a test failure.
    child.stdin.on('error', () => undefined);
    child.stdin.end(stdin);
  });
}
