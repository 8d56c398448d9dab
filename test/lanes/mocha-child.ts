import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { readLaneResult, RESULT_FILE_ENV, type LaneResult } from './lane-result';

// One mocha process over a list of files, as `npx mocha` would run them: the settings of .mocharc.json
// (timeout, exit, source maps, …) passed as flags, since mocha adds a config's `spec` to the files it is
// given; the lane's reporter; every output line prefixed with the lane's name.

export interface LaneRun {
  lane: string;
  files: string[];
  ms: number;
  /** Undefined when the process ended before its reporter wrote the result. */
  result?: LaneResult;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
}

/** `.mocharc.json`'s settings as command-line flags, without `spec`. */
export function mocharcFlags(rcFile: string): string[] {
  const rc = JSON.parse(fs.readFileSync(rcFile, 'utf8')) as Record<string, unknown>;
  return Object.entries(rc).flatMap(([key, value]): string[] => {
    if (key === 'spec') return [];
    if (value === true) return [`--${key}`];
    if (value === false) return [`--no-${key}`];
    if (Array.isArray(value)) return value.map((v) => `--${key}=${String(v)}`);
    return [`--${key}=${String(value)}`];
  });
}

/** Copies `from` to `to` line by line, each line behind `prefix`, whole lines per write. */
function prefixLines(from: NodeJS.ReadableStream, to: NodeJS.WritableStream, prefix: string): void {
  let rest = '';
  from.setEncoding('utf8');
  from.on('data', (chunk: string) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop() ?? '';
    if (lines.length > 0) to.write(lines.map((l) => `${prefix}${l}\n`).join(''));
  });
  from.on('end', () => {
    if (rest) to.write(`${prefix}${rest}\n`);
  });
}

/**
 * Ends whatever is left in a finished lane's process group: daemons and simulators that a test started
 * and a failed hook never stopped would otherwise run on, taking CPU from every later lane and run.
 */
function endGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  const signal = (s: NodeJS.Signals): boolean => {
    try {
      process.kill(-pid, s);
      return true;
    } catch {
      return false; // The group is empty.
    }
  };
  if (signal('SIGTERM')) setTimeout(() => signal('SIGKILL'), 5_000);
}

export interface MochaChild {
  /** Resolves when the process has ended. */
  done: Promise<LaneRun>;
  kill(signal: NodeJS.Signals): void;
}

/** Starts mocha over `files`; its output goes to `out` (this process's stdout and stderr unless given). */
export function startMocha(
  lane: string,
  files: string[],
  root: string,
  tag: string,
  out: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream } = process,
): MochaChild {
  const resultFile = path.join(os.tmpdir(), `wn-lane-${process.pid}-${lane}.json`);
  fs.rmSync(resultFile, { force: true });
  const args = [
    require.resolve('mocha/bin/mocha.js'),
    '--no-config',
    ...mocharcFlags(path.join(root, '.mocharc.json')),
    '--reporter',
    path.join(__dirname, 'file-reporter.js'),
    ...files,
  ];
  const began = Date.now();
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: { ...process.env, [RESULT_FILE_ENV]: resultFile },
    stdio: ['ignore', 'pipe', 'pipe'],
    // A process group of its own, so that what its tests leave running can be ended with it (below).
    detached: true,
  });
  prefixLines(child.stdout, out.stdout, tag);
  prefixLines(child.stderr, out.stderr, tag);
  const done = new Promise<LaneRun>((resolve) => {
    child.once('close', (exitCode, signal) => {
      endGroup(child.pid);
      const result = readLaneResult(resultFile);
      fs.rmSync(resultFile, { force: true });
      resolve({ lane, files, ms: Date.now() - began, result, exitCode, signal });
    });
  });
  return { done, kill: (signal) => child.kill(signal) };
}
