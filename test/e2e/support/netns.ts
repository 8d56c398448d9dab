import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { trackNetns, untrackNetns } from '../../support/netns-leftovers';
import { run, runRaw } from './exec';

// Test-owned network namespaces, created and deleted by name with iproute2. Every name starts with the
// caller's prefix, so a test can only ever delete what it made.

export const NETNS_DIR = '/var/run/netns';

export const netnsPath = (name: string): string => `${NETNS_DIR}/${name}`;

/** A fresh name such as `wne-node-3f9a1c`: prefix + role + random suffix. */
export function uniqueNetnsName(prefix: string, role: string): string {
  return `${prefix}${role}-${randomBytes(3).toString('hex')}`;
}

/**
 * Creates a namespace with its loopback up (a service bound to 127.0.0.1 inside it, such as
 * containerd's stream server, needs that).
 */
export async function addNetns(name: string): Promise<string> {
  await run('ip', ['netns', 'add', name]);
  trackNetns(name);
  try {
    await run('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
  } catch (err) {
    await deleteNetns(name);
    throw err;
  }
  return netnsPath(name);
}

/** Deletes a namespace by name; one that is already gone is fine. */
export async function deleteNetns(name: string): Promise<void> {
  untrackNetns(name);
  if (!existsSync(netnsPath(name))) return;
  const res = await runRaw('ip', ['netns', 'delete', name]);
  if (res.code !== 0 && existsSync(netnsPath(name))) {
    throw new Error(`ip netns delete ${name} failed: ${res.stderr.trim()}`);
  }
}

/** Runs a command inside a network namespace given by path (a test's own, or a pod's cni-… file). */
export function runInNetns(path: string, file: string, args: readonly string[]): Promise<string> {
  return run('nsenter', [`--net=${path}`, file, ...args]);
}
