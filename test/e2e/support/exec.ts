import { spawn } from 'node:child_process';

// Test-side process execution: setup and inspection only (ip, ctr, gcc, tar, nsenter). Product code on
// the attach path never spawns processes; tests may.

export interface RunOptions {
  /** Written to the child's stdin, which is then closed. */
  input?: string;
  /** The child's whole environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  timeoutMs?: number;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  code: number;
}

/** Runs a command to completion and reports its output and exit code without judging it. */
export function runRaw(file: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      env: opts.env ?? process.env,
      cwd: opts.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    const timer =
      opts.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            child.kill('SIGKILL');
          }, opts.timeoutMs);
    child.on('error', (e) => {
      if (timer) clearTimeout(timer);
      reject(new Error(`cannot run ${file}: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        code: code ?? (signal ? 128 : 1),
      });
    });
    // A child that exits before reading its stdin would otherwise crash us with EPIPE.
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs a command and throws, with its stderr, unless it exits 0. */
export async function run(file: string, args: readonly string[], opts: RunOptions = {}): Promise<string> {
  const res = await runRaw(file, args, opts);
  if (res.code !== 0) {
    throw new Error(`${file} ${args.join(' ')} exited ${res.code}: ${(res.stderr || res.stdout).trim()}`);
  }
  return res.stdout;
}
