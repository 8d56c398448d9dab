import * as net from 'node:net';
import type { DaemonConfig } from '../config';
import { failedPrecondition } from '../errors';
import type { Logger } from '../logger';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import type { Lifecycle } from '../lifecycle';

// One daemon per node: two daemons programming one network namespace (a leftover host service beside
// the DaemonSet, with other sockets and another state directory) would each take the other's links
// for orphans and add their own tunnel and tables. The lock is an abstract unix socket bound in the
// namespace the daemon programs (linux.hostNetns, else its own): an abstract name belongs to the
// network namespace, not to a file system, so a container and a host service with different mounts
// meet on it; and the kernel frees it the moment its holder dies, however it dies, so there is no
// stale lock file to judge. The holder answers whoever connects with who it is, for the refusal's words.

/** inversify identifier of the node lock; the daemon takes it first when bound (a real daemon's wiring). */
export const NODE_LOCK = Symbol.for('workloadnet.NodeLock');

/**
 * The lock's address. Node 20 binds an abstract name with the whole sun_path (the name padded with
 * NULs), later Node releases with the name's own length: a name that fills sun_path is the same address
 * for both, so daemons on either side of that change still meet.
 */
const SUN_PATH_BYTES = 108;
export const NODE_LOCK_ADDRESS = '\0workloadnet.io/daemon'.padEnd(SUN_PATH_BYTES, '\0');

/** How long a newcomer waits for the holder to say who it is. */
const ASK_TIMEOUT_MS = 2000;

/** What the holder tells a newcomer. */
export interface LockHolder {
  pid: number;
  socket: string;
  stateDir: string;
}

export class NodeLock implements Lifecycle {
  readonly name = 'node lock';
  private server: net.Server | undefined;

  constructor(
    private readonly config: Pick<DaemonConfig, 'socket' | 'stateDir' | 'linux'>,
    private readonly log: Logger,
  ) {}

  /** Takes the lock, or fails naming the daemon that holds it; changes nothing else. */
  async start(): Promise<void> {
    const where = this.config.linux.hostNetns;
    const ns = where ? await NetnsHandle.open(where) : NetnsHandle.own();
    const me: LockHolder = { pid: process.pid, socket: this.config.socket, stateDir: this.config.stateDir };
    const server = net.createServer((conn) => conn.end(JSON.stringify(me)));
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.once('listening', resolve);
        // The socket is created inside listen(): inside the window it belongs to the served namespace.
        ns.enter(() => server.listen(NODE_LOCK_ADDRESS));
      });
      this.server = server;
      this.log.debug({ netns: ns.path, inode: ns.inode }, 'holding the node lock');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      const holder = await askHolder(ns);
      const namespace = where ? `${where}, inode ${ns.inode}` : `inode ${ns.inode}`;
      throw failedPrecondition(
        `another daemon is already serving this node's network namespace (${namespace}): ` +
          `${describeHolder(holder)}. Only one daemon may serve a node: stop that one first, or point ` +
          'this one at another namespace (linux.hostNetns). Nothing was changed',
      );
    } finally {
      ns.close();
    }
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  }
}

/** The holder's answer, or undefined when it does not give one in time. */
function askHolder(ns: NetnsHandle): Promise<LockHolder | undefined> {
  return new Promise((resolve) => {
    const conn = ns.enter(() => net.connect(NODE_LOCK_ADDRESS));
    const chunks: Buffer[] = [];
    const done = (holder: LockHolder | undefined): void => {
      clearTimeout(timer);
      conn.destroy();
      resolve(holder);
    };
    const timer = setTimeout(() => done(undefined), ASK_TIMEOUT_MS);
    conn.on('data', (c: Buffer) => chunks.push(c));
    conn.on('error', () => done(undefined));
    conn.on('end', () => done(parseHolder(Buffer.concat(chunks).toString('utf8'))));
  });
}

function parseHolder(text: string): LockHolder | undefined {
  try {
    const h = JSON.parse(text) as Partial<LockHolder>;
    if (typeof h.pid === 'number' && typeof h.socket === 'string' && typeof h.stateDir === 'string')
      return { pid: h.pid, socket: h.socket, stateDir: h.stateDir };
  } catch {
    // Not a daemon of ours, or one that died while answering: said as "did not say who it is".
  }
  return undefined;
}

export function describeHolder(h: LockHolder | undefined): string {
  if (!h) return 'a process that holds the workloadnet lock did not say who it is';
  return `pid ${h.pid} (as its PID namespace numbers it), API socket ${h.socket}, state ${h.stateDir}`;
}
