// Reading and writing net.* sysctls of a chosen network namespace through /proc/sys, without
// spawning `sysctl` and without blocking the event loop: the file is opened inside the namespace
// (see lib/netns/netns-handle.ts), the read or write itself runs on the threadpool.

import * as fs from 'node:fs';
import type { Netns } from './netns-handle';

/** Slash form below /proc/sys, e.g. "net/ipv4/ip_forward" or "net/ipv4/conf/wn1234/proxy_arp". */
export type SysctlPath = string;

export async function readSysctl(ns: Netns, path: SysctlPath): Promise<string> {
  const fd = openProcSysFile(ns, path, 'r');
  try {
    const buf = Buffer.alloc(256);
    const n = await new Promise<number>((resolve, reject) =>
      fs.read(fd, buf, 0, buf.length, 0, (err, bytes) => (err ? reject(err) : resolve(bytes))),
    );
    return buf.toString('utf8', 0, n).trim();
  } finally {
    await closeQuietly(fd);
  }
}

export async function writeSysctl(ns: Netns, path: SysctlPath, value: string): Promise<void> {
  const fd = openProcSysFile(ns, path, 'r+');
  try {
    const data = Buffer.from(`${value}\n`);
    await new Promise<void>((resolve, reject) =>
      fs.write(fd, data, 0, data.length, 0, (err) => (err ? reject(err) : resolve())),
    );
  } finally {
    await closeQuietly(fd);
  }
}

/** Writes `value` only when the current value differs; returns whether it wrote. */
export async function ensureSysctl(ns: Netns, path: SysctlPath, value: string): Promise<boolean> {
  if ((await readSysctl(ns, path)) === value) return false;
  await writeSysctl(ns, path, value);
  return true;
}

function closeQuietly(fd: number): Promise<void> {
  // A failed close of a /proc/sys fd loses nothing; there is no data to flush.
  return new Promise((resolve) => fs.close(fd, () => resolve()));
}

/**
 * Opens `/proc/sys/<relPath>` as seen from inside `ns` and returns the fd (caller closes it). The
 * net.* sysctls a file shows are decided when it is opened, so reading and writing the fd later, on
 * the threadpool and outside the window, still acts on `ns`.
 */
export function openProcSysFile(ns: Netns, relPath: SysctlPath, flags: 'r' | 'r+'): number {
  if (
    relPath.startsWith('/') ||
    relPath.split('/').some((seg) => seg === '..' || seg === '') ||
    relPath.includes('\0')
  ) {
    throw new TypeError(`bad /proc/sys path "${relPath}"`);
  }
  return ns.enter(() => fs.openSync(`/proc/sys/${relPath}`, flags));
}
