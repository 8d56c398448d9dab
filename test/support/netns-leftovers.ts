import { execFileSync } from 'node:child_process';

// Namespaces this process made and has not deleted yet. Each helper that makes namespaces records them
// here, so that they are deleted when the process ends without its cleanup running: at exit, and on
// SIGINT, SIGTERM or SIGHUP where nothing else handles the signal (a benchmark interrupted by hand; a
// mocha run handles SIGINT itself and runs its after hooks). Benchmarks make thousands of namespaces,
// and one interrupted mid-way used to leave them all behind.

const leftovers = new Set<string>();
let hooked = false;

/** Records namespaces just made (by name), to be deleted if the process ends first. */
export function trackNetns(...names: string[]): void {
  for (const n of names) leftovers.add(n);
  hookProcessEnd();
}

/** Forgets namespaces the caller deleted (or is deleting). */
export function untrackNetns(...names: string[]): void {
  for (const n of names) leftovers.delete(n);
}

/** Deletes every namespace still recorded, in one ip(8) call: on the way out, time is short. */
export function deleteLeftoverNetns(): void {
  const names = [...leftovers];
  leftovers.clear();
  deleteNetnsBatch(names);
}

/** Forgets `names` and deletes them in one ip(8) call; one already gone is passed over. */
export function deleteNetnsBatch(names: string[]): void {
  untrackNetns(...names);
  if (names.length === 0) return;
  try {
    execFileSync('ip', ['-force', '-batch', '-'], {
      input: names.map((n) => `netns del ${n}\n`).join(''),
      stdio: ['pipe', 'ignore', 'ignore'],
    });
  } catch {
    // -force carries on past a namespace already gone, and ip(8) then exits non-zero.
  }
}

function hookProcessEnd(): void {
  if (hooked) return;
  hooked = true;
  process.once('exit', deleteLeftoverNetns);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    if (process.listenerCount(signal) > 0) continue;
    const onSignal = (): void => {
      deleteLeftoverNetns();
      // Then the signal's default action, so the exit status still says what ended the process.
      process.removeListener(signal, onSignal);
      process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}
