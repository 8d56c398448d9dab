// Names and descriptions of errno values, for errors that callers branch on ('EEXIST', 'ENODEV') and
// people read. Shared by the system-call binding and the netlink codec, so both name errors alike.

import * as os from 'node:os';
import * as util from 'node:util';

// Where two names share a number, prefer the one the kernel's headers use for netlink errors.
const PREFERRED = new Set(['EOPNOTSUPP', 'EAGAIN', 'EDEADLK']);
const ERRNO_NAMES: ReadonlyMap<number, string> = (() => {
  const m = new Map<number, string>();
  for (const [name, num] of Object.entries(os.constants.errno)) {
    if (!m.has(num) || PREFERRED.has(name)) m.set(num, name);
  }
  return m;
})();

/** 'EEXIST' for 17, or 'E<n>' for a number this platform does not name. */
export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}

/** A short human description ("file already exists"), when libuv knows the number. */
export function errnoDescription(errno: number): string | undefined {
  return util.getSystemErrorMap().get(-errno)?.[1];
}
