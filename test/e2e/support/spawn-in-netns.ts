import { ChildProcess, spawn, SpawnOptions } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import * as koffi from 'koffi';

// Starts a process directly inside a network namespace, with no launcher in between: the JS thread
// enters the namespace, forks (a child inherits the forking thread's namespaces), and switches back, all
// synchronously so nothing else runs while the thread is away. This is how a runtime living in the node
// namespace (containerd) execs CNI plugins, so a benchmark pays no `ip netns exec`/`nsenter` exec on
// top. child_process.spawn() forks and execs before it returns, which is what makes the window safe.

const CLONE_NEWNET = 0x40000000;

interface Libc {
  setns(fd: number, nstype: number): number;
}

let libc: Libc | undefined;
let homeFd: number | undefined;

function init(): { api: Libc; home: number } {
  if (!libc) {
    const lib = koffi.load('libc.so.6');
    libc = { setns: lib.func('int setns(int fd, int nstype)') as Libc['setns'] };
  }
  // The namespace to come back to, fixed at first use (the thread's own, i.e. the process').
  homeFd ??= openSync('/proc/thread-self/ns/net', 'r');
  return { api: libc, home: homeFd };
}

export function spawnInNetns(
  netnsPath: string,
  file: string,
  args: readonly string[],
  options: SpawnOptions,
): ChildProcess {
  const { api, home } = init();
  const target = openSync(netnsPath, 'r');
  try {
    if (api.setns(target, CLONE_NEWNET) !== 0) {
      throw new Error(`setns(${netnsPath}) failed: errno ${koffi.errno()}`);
    }
    try {
      return spawn(file, args, options);
    } finally {
      if (api.setns(home, CLONE_NEWNET) !== 0) {
        // Carrying on in the wrong namespace would silently run everything after this elsewhere.
        process.stderr.write(`cannot return to the original network namespace (errno ${koffi.errno()})\n`);
        process.abort();
      }
    }
  } finally {
    closeSync(target);
  }
}
