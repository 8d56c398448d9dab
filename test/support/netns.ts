import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

// Test-owned network namespaces, created and deleted by name. Test code may use ip(8); product code may
// not.

export const isRoot = process.getuid?.() === 0;

export function uniqueName(prefix: string): string {
  return `${prefix}${randomBytes(4).toString('hex')}`;
}

export function addNetns(name: string): string {
  execFileSync('ip', ['netns', 'add', name]);
  return `/var/run/netns/${name}`;
}

export function delNetns(name: string): void {
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

/**
 * Namespaces created through this helper are deleted in one call, and also when the process ends
 * without calling it: at exit, and on SIGINT, SIGTERM or SIGHUP where nothing else handles the signal
 * (a benchmark interrupted by hand; a mocha run handles SIGINT itself and runs its after hooks).
 * Benchmarks create thousands; an interrupted one used to leave them all behind.
 */
export class NetnsSet {
  private readonly names: string[] = [];
  constructor(private readonly prefix: string) {}
  add(): { name: string; path: string } {
    const name = uniqueName(this.prefix);
    this.names.push(name);
    liveSets.add(this);
    deleteLeftoversOnExit();
    return { name, path: addNetns(name) };
  }
  cleanup(): void {
    for (const n of this.names.splice(0)) delNetns(n);
    liveSets.delete(this);
  }
  /** Deletes what is left in one ip(8) call; for the exit path, where every millisecond counts. */
  static deleteLeftovers(): void {
    const names = [...liveSets].flatMap((set) => set.names.splice(0));
    liveSets.clear();
    if (names.length === 0) return;
    try {
      execFileSync('ip', ['-force', '-batch', '-'], {
        input: names.map((n) => `netns del ${n}\n`).join(''),
        stdio: ['pipe', 'ignore', 'ignore'],
      });
    } catch {
      // -force carries on past a namespace already gone; nothing else can be done at exit.
    }
  }
}

const liveSets = new Set<NetnsSet>();
let exitHooked = false;

function deleteLeftoversOnExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  process.once('exit', () => NetnsSet.deleteLeftovers());
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    if (process.listenerCount(signal) > 0) continue;
    const onSignal = (): void => {
      NetnsSet.deleteLeftovers();
      // Then the signal's default action, so the exit status still says what ended the process.
      process.removeListener(signal, onSignal);
      process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}
