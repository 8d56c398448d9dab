import { execFileSync } from 'node:child_process';
import type { NetnsSet } from '../support/netns';

// The "node" side of a reliability test: a test-owned namespace in which the daemon runs, with lo up
// and, like a real node, an uplink and a default route (proxy ARP answers for the workloads' link-local
// gateway only when the node has a route to it). A veth pair stands for the uplink: this kernel has no
// dummy driver.

export function makeNodeNamespace(namespaces: NetnsSet): string {
  const node = namespaces.add().name;
  const ip = (...args: string[]): void => void execFileSync('ip', ['-n', node, ...args]);
  ip('link', 'set', 'lo', 'up');
  ip('link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1');
  ip('link', 'set', 'up0', 'up');
  ip('link', 'set', 'up1', 'up');
  ip('route', 'add', 'default', 'dev', 'up0');
  return node;
}
