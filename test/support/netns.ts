import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { trackNetns, untrackNetns } from './netns-leftovers';

// Test-owned network namespaces, created and deleted by name. Test code may use ip(8); product code may
// not.

export const isRoot = process.getuid?.() === 0;

export function uniqueName(prefix: string): string {
  return `${prefix}${randomBytes(4).toString('hex')}`;
}

export function addNetns(name: string): string {
  execFileSync('ip', ['netns', 'add', name]);
  trackNetns(name);
  return `/var/run/netns/${name}`;
}

export function delNetns(name: string): void {
  untrackNetns(name);
  try {
    execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
  } catch {
    // Already gone: deleting is idempotent for tests.
  }
}

/** Runs ip(8) inside a namespace and returns its JSON output. */
export function ipJson<T = unknown>(netns: string, args: string[]): T {
  return JSON.parse(execFileSync('ip', ['-n', netns, '-j', ...args], { encoding: 'utf8' }) || '[]') as T;
}

/**
 * Makes a namespace look like a node's: lo up and an uplink with a default route (proxy ARP answers
 * for the workloads' link-local gateway only when the node has a route to it). A veth pair kept inside
 * the namespace stands for the uplink: this kernel has no dummy driver, and no traffic leaves.
 */
export function addNodeUplink(netns: string, address?: string): void {
  const ip = (...args: string[]): void => void execFileSync('ip', ['-n', netns, ...args]);
  ip('link', 'set', 'lo', 'up');
  ip('link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1');
  ip('link', 'set', 'up0', 'up');
  ip('link', 'set', 'up1', 'up');
  if (address) ip('addr', 'add', `${address}/32`, 'dev', 'up0');
  ip('route', 'add', 'default', 'dev', 'up0');
}

/** Namespaces created through this helper are deleted in one call (and at exit: netns-leftovers.ts). */
export class NetnsSet {
  private readonly names: string[] = [];
  constructor(private readonly prefix: string) {}
  add(): { name: string; path: string } {
    const name = uniqueName(this.prefix);
    this.names.push(name);
    return { name, path: addNetns(name) };
  }
  cleanup(): void {
    for (const n of this.names.splice(0)) delNetns(n);
  }
}
