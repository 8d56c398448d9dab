import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { NetnsSet } from '../support/netns';

// Namespace paths a hostile or confused caller might send, each labelled with whether the daemon must
// accept it. Everything is created by the test: a network namespace of its own (bind-mounted and as
// /proc/<pid>/ns/net of a process inside it), symlinks to it and to the host's and the daemon's own
// namespaces, and files that are not namespaces at all. FIFOs are left out on purpose: see
// fuzz-api.test.ts.

export interface NetnsPathZoo {
  /** Paths that name a usable workload network namespace. */
  valid: string[];
  /** Paths that must be refused with INVALID_ARGUMENT. */
  invalid: string[];
  cleanup(): void;
}

export async function makeNetnsPathZoo(namespaces: NetnsSet): Promise<NetnsPathZoo> {
  const ns = namespaces.add();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnr-paths-'));
  // A process inside the namespace, for the /proc/<pid>/ns/net form.
  const sleeper: ChildProcess = spawn('ip', ['netns', 'exec', ns.name, 'sleep', '600'], { stdio: 'ignore' });
  const nsInode = fs.statSync(ns.path).ino;
  const inside = (): boolean => {
    try {
      return fs.statSync(`/proc/${sleeper.pid}/ns/net`).ino === nsInode;
    } catch {
      return false;
    }
  };
  // `ip netns exec` switches namespaces before it execs sleep: wait until it has.
  for (let i = 0; i < 200 && !inside(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!inside()) throw new Error(`the sleeper in ${ns.name} never entered it`);
  const link = (name: string, target: string): string => {
    const p = path.join(dir, name);
    fs.symlinkSync(target, p);
    return p;
  };
  const file = path.join(dir, 'regular-file');
  fs.writeFileSync(file, 'not a namespace');
  fs.mkdirSync(path.join(dir, 'a-directory'));
  const loop = path.join(dir, 'loop');
  fs.symlinkSync(loop, loop);
  const name = path.basename(ns.path);
  const netnsDir = path.dirname(ns.path);
  const pid = sleeper.pid ?? 0;

  const valid = [ns.path, `/proc/${pid}/ns/net`, link('to-workload', ns.path)];
  const invalid = [
    // The host's and the daemon's own namespaces, directly and behind symlinks.
    '/proc/1/ns/net',
    '/proc/self/ns/net',
    '/proc/thread-self/ns/net',
    `/proc/${process.pid}/ns/net`,
    link('to-pid1', '/proc/1/ns/net'),
    link('to-self', '/proc/self/ns/net'),
    link('to-own-pid', `/proc/${process.pid}/ns/net`),
    // Namespaces of other types, and the directory holding them.
    '/proc/1/ns/mnt',
    '/proc/self/ns/pid',
    '/proc/self/ns/user',
    `/proc/${pid}/ns/uts`,
    link('to-mnt', '/proc/self/ns/mnt'),
    '/proc/self/ns',
    // Path tricks around a valid namespace.
    `${netnsDir}/../${path.basename(netnsDir)}/${name}`,
    `${netnsDir}//${name}`,
    `${netnsDir}/./${name}`,
    `${ns.path}/`,
    `${ns.path}/..`,
    `${ns.path}\0`,
    `${ns.path}\0/../../etc/passwd`,
    ns.path.slice(1),
    `./${name}`,
    '..',
    '.',
    '',
    // Not namespaces at all.
    '/',
    '/dev/null',
    '/dev/zero',
    '/etc/hostname',
    file,
    path.join(dir, 'a-directory'),
    loop,
    link('dangling', path.join(dir, 'nowhere')),
    '/nonexistent/netns',
    '/proc/999999999/ns/net',
    `/${'a'.repeat(4095)}`,
    `/${'a'.repeat(5000)}`,
    `/tmp/${'\u{1F600}'.repeat(50)}`,
    '/tmp/\u00e9\u0301',
  ];
  return {
    valid,
    invalid,
    cleanup: () => {
      sleeper.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Creates a FIFO: opening one for reading blocks until a writer appears. */
export function makeFifo(dir: string, name = 'fifo'): string {
  const p = path.join(dir, name);
  execFileSync('mkfifo', [p]);
  return p;
}
