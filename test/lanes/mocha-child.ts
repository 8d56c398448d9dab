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

export interface MochaChild {
  /** Resolves when the process has ended. */
  done: Promise<LaneRun>;
  kill(signal: NodeJS.Signals): void;
}

export function startMocha(lane: string, files: string[], root: string, tag: string): MochaChild {
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
  });
  prefixLines(child.stdout, process.stdout, tag);
  prefixLines(child.stderr, process.stderr, tag);
  const done = new Promise<LaneRun>((resolve) => {
    child.once('close', (exitCode, signal) => {
      const result = readLaneResult(resultFile);
      fs.rmSync(resultFile, { force: true });
      resolve({ lane, files, ms: Date.now() - began, result, exitCode, signal });
    });
  });
  return { done, kill: (signal) => child.kill(signal) };
}
