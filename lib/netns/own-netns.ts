// The network namespace the main thread runs in, opened once at load. Its own file because everything
// that acts in or judges a namespace leans on it: entering another namespace must be able to switch
// back, and "is this an nsfs file" and "is this our own namespace" are both answered against it.

import * as fs from 'node:fs';
import { NetnsStateError } from './netns-error';

/** Opened at load, before anything could have switched the main thread elsewhere. */
const original: { fd: number; inode: number; dev: number } | Error = (() => {
  try {
    const fd = fs.openSync('/proc/thread-self/ns/net', 'r');
    const st = fs.fstatSync(fd);
    return { fd, inode: st.ino, dev: st.dev };
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
})();

/** The process's own namespace: its fd, its nsfs inode and the nsfs device. */
export function originalNamespace(): { fd: number; inode: number; dev: number } {
  if (original instanceof Error) {
    throw new NetnsStateError(
      'no-own-namespace',
      `cannot open this process's network namespace: ${original.message}`,
    );
  }
  return original;
}
