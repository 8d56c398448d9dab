import { ChildProcess, spawn, SpawnOptions } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { CLONE_NEWNET, setns } from '../../../lib/libc';

// Starts a process directly inside a network namespace, with no launcher in between: the JS thread
// enters the namespace, forks (a child inherits the forking thread's namespaces), and switches back, all
// synchronously so nothing else runs while the thread is away. This is how a runtime living in the node
// namespace (containerd) execs CNI plugins, so a benchmark pays no `ip netns exec`/`nsenter` exec on
// top. child_process.spawn() forks and execs before it returns, which is what makes the window safe.

let homeFd: number | undefined;

/** The namespace to come back to, fixed at first use (the thread's own, i.e. the process'). */
function home(): number {
  homeFd ??= openSync('/proc/thread-self/ns/net', 'r');
  return homeFd;
}

export function spawnInNetns(
  netnsPath: string,
  file: string,
  args: readonly string[],
  options: SpawnOptions,
): ChildProcess {
  const back = home();
  const target = openSync(netnsPath, 'r');
  try {
    setns(target, CLONE_NEWNET);
    try {
      return spawn(file, args, options);
    } finally {
      try {
        setns(back, CLONE_NEWNET);
      } catch (err) {
        // Carrying on in the wrong namespace would silently run everything after this elsewhere.
        process.stderr.write(`cannot return to the original network namespace (${String(err)})\n`);
        process.abort();
      }
    }
  } finally {
    closeSync(target);
  }
}
