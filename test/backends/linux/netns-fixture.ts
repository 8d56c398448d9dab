// Test-owned network namespaces for the Linux backend tests. Every name starts with "wnl-" so that a
// leftover is recognisable, and every namespace is deleted by name. Set-up and inspection may use
// `ip`; the code under test never does.

import { execFile } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { promisify } from 'node:util';
import { trackNetns, untrackNetns } from '../../support/netns-leftovers';
import { requireProgram } from '../../support/system-program';

const run = promisify(execFile);

export const NETNS_PREFIX = 'wnl-';

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

export function netnsPath(name: string): string {
  return `/var/run/netns/${name}`;
}

export function netnsInode(name: string): number {
  return fs.statSync(netnsPath(name)).ino;
}

/** A set of namespaces created by one test file and deleted together, even after failures. */
export class NetnsPool {
  private readonly names = new Set<string>();
  private readonly tag = crypto.randomBytes(3).toString('hex');

  /** A new empty namespace named wnl-<role>-<tag>[-n]. */
  async add(role: string): Promise<string> {
    let name = `${NETNS_PREFIX}${role}-${this.tag}`;
    if (this.names.has(name)) name += `-${this.names.size}`;
    await ip('netns', 'add', name);
    this.names.add(name);
    trackNetns(name);
    return name;
  }

  /** Many namespaces at once through one `ip -batch` (quick for 20+). */
  async addMany(role: string, count: number): Promise<string[]> {
    const names = Array.from({ length: count }, (_, i) => `${NETNS_PREFIX}${role}-${this.tag}-${i}`);
    const batch = names.map((n) => `netns add ${n}`).join('\n');
    await new Promise<void>((resolve, reject) => {
      const child = execFile('ip', ['-batch', '-'], (err) => (err ? reject(err) : resolve()));
      child.stdin?.end(batch);
    });
    names.forEach((n) => this.names.add(n));
    trackNetns(...names);
    return names;
  }

  /**
   * A "node" namespace standing in for the host: an uplink with 10.250.0.1/32 and a default route
   * through it (proxy ARP only answers for destinations the node has a route to). The uplink is a
   * veth pair whose both ends stay in the node namespace (this kernel has no dummy driver).
   */
  async addNode(): Promise<string> {
    const node = await this.add('node');
    await ip('-n', node, 'link', 'set', 'lo', 'up');
    await ip('-n', node, 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up0p');
    await ip('-n', node, 'addr', 'add', '10.250.0.1/32', 'dev', 'up0');
    await ip('-n', node, 'link', 'set', 'up0p', 'up');
    await ip('-n', node, 'link', 'set', 'up0', 'up');
    await ip('-n', node, 'route', 'add', 'default', 'dev', 'up0');
    return node;
  }

  /** Deletes one namespace now (and forgets it). */
  async remove(name: string): Promise<void> {
    this.names.delete(name);
    untrackNetns(name);
    await ip('netns', 'del', name);
  }

  async cleanup(): Promise<void> {
    const names = [...this.names];
    this.names.clear();
    untrackNetns(...names);
    if (names.length === 0) return;
    const batch = names.map((n) => `netns del ${n}`).join('\n');
    await new Promise<void>((resolve) => {
      // -force: carry on past a namespace a test already deleted.
      const child = execFile('ip', ['-force', '-batch', '-'], () => resolve());
      child.stdin?.end(batch);
    });
  }
}
