import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { failedPrecondition, invalidArgument } from '../errors';

// Safe handling of the daemon's listening sockets. A leftover socket file from a crashed daemon must be
// removed or bind fails; a socket that still answers belongs to a live daemon and must not be stolen;
// anything that is not a socket is never deleted.

export async function prepareSocketPath(socketPath: string): Promise<void> {
  fs.mkdirSync(path.dirname(socketPath), { recursive: true, mode: 0o750 });
  let st: fs.Stats;
  try {
    st = fs.lstatSync(socketPath);
  } catch {
    return;
  }
  if (!st.isSocket()) {
    throw failedPrecondition(
      `${socketPath} exists and is not a socket; refusing to replace it (remove it or configure another socket)`,
    );
  }
  if (await answers(socketPath)) {
    throw failedPrecondition(
      `another daemon is already serving on ${socketPath}; stop it first or pick another socket`,
    );
  }
  fs.unlinkSync(socketPath);
}

function answers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = net.connect(socketPath);
    const done = (v: boolean): void => {
      clearTimeout(timer);
      c.destroy();
      resolve(v);
    };
    // No answer either way in time: something holds the socket; treat it as live rather than steal it.
    const timer = setTimeout(() => done(true), 1000);
    c.once('connect', () => done(true));
    c.once('error', (err: NodeJS.ErrnoException) =>
      done(err.code !== 'ECONNREFUSED' && err.code !== 'ENOENT'),
    );
  });
}

/** Restricts a freshly bound socket to its owner and group (0660), optionally handing it to a group. */
export function secureSocket(socketPath: string, group: string): void {
  fs.chmodSync(socketPath, 0o660);
  if (group) fs.chownSync(socketPath, process.getuid?.() ?? 0, resolveGid(group));
}

function resolveGid(group: string): number {
  if (/^\d+$/.test(group)) return Number(group);
  const line = fs
    .readFileSync('/etc/group', 'utf8')
    .split('\n')
    .find((l) => l.split(':')[0] === group);
  const gid = line?.split(':')[2];
  if (gid === undefined) throw invalidArgument(`socket group "${group}" does not exist`);
  return Number(gid);
}
