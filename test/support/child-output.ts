import type { ChildProcess } from 'node:child_process';

// What a child process the test spawned (with stdout and stderr piped) printed, and how it ended: one
// place that collects both streams, so callers judge the result instead of wiring up events.

export interface ChildOutput {
  /** The exit code; null when a signal ended it. */
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Waits until `child` has exited and closed its streams; rejects only when it could not be started. */
export function childOutput(child: ChildProcess): Promise<ChildOutput> {
  return new Promise((resolve, reject) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (b: Buffer) => out.push(b));
    child.stderr?.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({
        code,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      }),
    );
  });
}
