import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { failedPrecondition, internal, invalidArgument } from '../errors';

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

/**
 * Listens on a socket path that prepareSocketPath has cleared, then secures it (secureSocket): the one
 * way the daemon's net servers (the API, the CNI endpoint) take their socket. `what` names it in errors.
 */
export async function listenOnSocket(
  server: net.Server,
  socketPath: string,
  what: string,
  access: { group: string; mode?: number },
): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException): void =>
      reject(
        err.code === 'EADDRINUSE'
          ? failedPrecondition(
              `another process bound the ${what} socket ${socketPath} while this one was starting`,
            )
          : internal(`cannot listen on ${what} socket ${socketPath}: ${err.message}`),
      );
    server.once('error', onError);
    server.listen(socketPath, () => {
      server.off('error', onError);
      resolve();
    });
  });
  secureSocket(socketPath, access.group, access.mode);
}

/**
 * Restricts a freshly bound socket to its owner and group (0660 unless told), optionally handing it to
 * a group. bind() applied the umask (0755 with the usual 022, which lets nobody else connect); setting
 * the mode afterwards therefore never exposes the socket to more than it allows.
 */
export function secureSocket(socketPath: string, group: string, mode = 0o660): void {
  fs.chmodSync(socketPath, mode);
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
