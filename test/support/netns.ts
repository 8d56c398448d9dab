import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { deleteNetnsBatch, trackNetns, untrackNetns } from './netns-leftovers';

// Test-owned network namespaces, created and deleted by name. Test code may use ip(8); product code may
// not.

export const isRoot = process.getuid?.() === 0;

export function uniqueName(prefix: string): string {
  return `${prefix}${randomBytes(4).toString('hex')}`;
}

export function netnsPath(name: string): string {
  return `/var/run/netns/${name}`;
}

export function addNetns(name: string): string {
  execFileSync('ip', ['netns', 'add', name]);
  trackNetns(name);
  return netnsPath(name);
}

export function delNetns(name: string): void {
  untrackNetns(name);
  try {
    execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
  } catch {
    // Already gone: deleting is idempotent for tests.
  }
}

/** A link as `ip -j link show` prints it: the fields the tests read. */
export interface IpLink {
  ifindex: number;
  ifname: string;
  mtu: number;
  group: string;
  address: string;
  flags: string[];
  ifalias?: string;
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

/** One of a set's namespaces: its name for ip(8), its path for the API. */
export interface TestNamespace {
  name: string;
  path: string;
}

/**
 * The test namespaces of one suite or benchmark, made by name and deleted together however it ends: by
 * cleanup(), or when the process ends first (netns-leftovers.ts). Every name starts with the set's
 * prefix (and the role given, if any), so that a leftover says whose it is.
 */
export class NetnsSet {
  private readonly names = new Set<string>();
  constructor(private readonly prefix: string) {}

  /** A new empty namespace named <prefix>[<role>-]<random>. */
  add(role?: string): TestNamespace {
    const name = this.newName(role);
    const path = addNetns(name);
    this.names.add(name);
    return { name, path };
  }

  /** Many new empty namespaces through one `ip -batch` (quick for a benchmark's thousands). */
  addMany(count: number, role?: string): TestNamespace[] {
    const made = Array.from({ length: count }, () => this.newName(role));
    // Recorded first: a batch that fails half-way has still made the namespaces before the failing line.
    for (const name of made) this.names.add(name);
    trackNetns(...made);
    execFileSync('ip', ['-batch', '-'], { input: made.map((n) => `netns add ${n}\n`).join('') });
    return made.map((name) => ({ name, path: netnsPath(name) }));
  }

  /** A new namespace standing in for a node: an uplink with `address` and a default route (addNodeUplink). */
  addNode(address: string): TestNamespace {
    const node = this.add('node');
    addNodeUplink(node.name, address);
    return node;
  }

  /** Deletes one of the set's namespaces now. */
  remove(name: string): void {
    this.names.delete(name);
    delNetns(name);
  }

  /** Deletes every namespace of the set, in one ip(8) call. */
  cleanup(): void {
    const names = [...this.names];
    this.names.clear();
    deleteNetnsBatch(names);
  }

  private newName(role: string | undefined): string {
    return uniqueName(role ? `${this.prefix}${role}-` : this.prefix);
  }
}
