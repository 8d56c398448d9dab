// ip(8) for the Linux backend tests' set-up and inspection, asynchronous so that a backend in the same
// process keeps running meanwhile; the code under test never uses it. Their namespaces come from
// NetnsSet (test/support/netns.ts).

import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import { promisify } from 'node:util';
import { netnsPath } from './netns';
import { requireProgram } from './system-program';

const run = promisify(execFile);

/** Runs `ip` with arguments; rejects with its stderr on failure. */
export async function ip(...args: string[]): Promise<string> {
  try {
    const { stdout } = await run('ip', args, { encoding: 'utf8' });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`ip ${args.join(' ')}: ${e.stderr?.trim() || e.message}`);
  }
}

/** `ip -n <ns>` with the words of `line`, as one would type it (so no word may hold a space). */
export function ipLine(ns: string, line: string): Promise<string> {
  return ip('-n', ns, ...line.split(' '));
}

/** `ip -j -n <ns> …` parsed. */
export async function ipJson<T = unknown>(ns: string, ...args: string[]): Promise<T[]> {
  const out = await ip('-j', '-n', ns, ...args);
  return out.trim() === '' ? [] : (JSON.parse(out) as T[]);
}

/** Runs a command inside a namespace (set-up and traffic only). */
export async function netnsExec(ns: string, ...cmd: string[]): Promise<string> {
  if (cmd[0] !== undefined && !cmd[0].startsWith('/')) requireProgram(cmd[0]);
  const { stdout } = await run('ip', ['netns', 'exec', ns, ...cmd], { encoding: 'utf8' });
  return stdout;
}

export function netnsInode(name: string): number {
  return fs.statSync(netnsPath(name)).ino;
}
