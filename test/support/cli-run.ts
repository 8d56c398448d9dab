import { expect } from 'chai';
import { execFile, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CLI } from './daemon-process';

// The real `workloadnet` binary run as an operator runs it, and its --help held to a snapshot.

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

const SNAPSHOTS = path.resolve(__dirname, '..', '..', '..', 'test', 'cli', 'snapshots');

/** Runs the CLI and waits for it; the terminal is 100 columns wide, as the snapshots were taken. */
export function runCli(args: string[]): CliRun {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    env: { ...process.env, COLUMNS: '100' },
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** Asynchronous, so that a daemon in this same process can answer while the CLI runs. */
export function runCliAsync(args: string[]): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * Expects `workloadnet <cmd> --help` to succeed, show an example and read as test/cli/snapshots/
 * help-<name>.txt (`name` is the words of `cmd` joined by dashes, `main` for none). With
 * UPDATE_SNAPSHOTS=1 the snapshot is written first.
 */
export function expectHelpSnapshot(cmd: string[]): void {
  const r = runCli([...cmd, '--help']);
  expect(r.code).to.equal(0);
  expect(r.stdout).to.include('Example');
  const file = path.join(SNAPSHOTS, `help-${cmd.length ? cmd.join('-') : 'main'}.txt`);
  if (process.env.UPDATE_SNAPSHOTS === '1') fs.writeFileSync(file, r.stdout);
  expect(r.stdout).to.equal(fs.readFileSync(file, 'utf8'));
}
