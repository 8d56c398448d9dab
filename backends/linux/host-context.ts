// The backend's hold on the host namespace: the namespace itself, its long-lived netlink socket, the
// group deleter, the forwarding switches and the netlink thread. Its own file because opening it is
// where every privilege problem surfaces, and each must fail with one line that says what to grant.

import { failedPrecondition, knownWorkloadNetError, type WorkloadNetError } from '../../core/errors';
import { NetnsError } from '../../lib/netns/netns-error';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import { NetlinkError, NetlinkSocketError } from '../../lib/rtnetlink/errors';
import { getLink, setLinkRequest } from '../../lib/rtnetlink/link';
import { NetlinkSocket } from '../../lib/rtnetlink/socket';
import { GroupDeleter } from './group-deleter';
import { HostForwarding } from './host-forwarding';
import type { ResolvedLinuxBackendOptions } from './linux-backend-options';
import { NetlinkThread } from './netlink-thread';
import { RestartingReader } from './restarting-reader';

export interface HostContext {
  ns: NetnsHandle;
  sock: NetlinkSocket;
  deleter: GroupDeleter;
  forwarding: HostForwarding;
  /**
   * Runs attaches' netlink exchanges, started again whenever it ends; undefined when turned off. While
   * it is down, attaches take the threadpool path.
   */
  thread: RestartingReader<NetlinkThread> | undefined;
}

/** Opens the host namespace and its socket and checks the privileges the backend needs there. */
export async function openHostContext(opts: ResolvedLinuxBackendOptions): Promise<HostContext> {
  const path = opts.hostNetnsPath;
  let ns: NetnsHandle;
  try {
    ns = path === undefined ? NetnsHandle.own() : await NetnsHandle.open(path);
  } catch (err) {
    if (err instanceof NetnsError && err.reason === 'permission') throw needsRoot(`opening ${path}`);
    const known = knownWorkloadNetError(err);
    if (known) throw failedPrecondition(`linux backend: host namespace: ${known.message}`);
    throw err;
  }
  let sock: NetlinkSocket | undefined;
  try {
    sock = NetlinkSocket.openIn(ns);
    // Reading links works unprivileged; an empty SETLINK on lo is the cheapest request that needs
    // CAP_NET_ADMIN, and changes nothing.
    const lo = await getLink(sock, { name: 'lo' });
    if (!lo) throw failedPrecondition(`linux backend: no loopback interface in ${ns.path}`);
    await sock.request(setLinkRequest({ index: lo.index }, {}));
    return {
      ns,
      sock,
      deleter: new GroupDeleter(sock, opts.detachGroup),
      forwarding: new HostForwarding(ns, opts.logger),
      thread: await startThread(ns, opts),
    };
  } catch (err) {
    void sock?.close();
    ns.close();
    if (err instanceof NetlinkError && (err.code === 'EPERM' || err.code === 'EACCES'))
      throw needsRoot('netlink');
    if (err instanceof NetlinkSocketError && err.reason === 'permission')
      throw needsRoot(`entering ${ns.path}`);
    throw err;
  }
}

/**
 * The netlink thread, unless turned off. One that cannot start, or ends, is started again after a
 * back-off (restarting-reader.ts); attaches use the threadpool path meanwhile.
 */
async function startThread(
  ns: NetnsHandle,
  opts: ResolvedLinuxBackendOptions,
): Promise<RestartingReader<NetlinkThread> | undefined> {
  if (!opts.netlinkThread) return undefined;
  const thread = new RestartingReader({
    what: 'netlink thread',
    meanwhile: 'attaches use the threadpool (slower)',
    logger: opts.logger,
    start: (died) => NetlinkThread.start(ns, died),
  });
  await thread.begin();
  return thread;
}

function needsRoot(what: string): WorkloadNetError {
  return failedPrecondition(
    `linux backend: permission denied (${what}); run workloadnetd as root or with CAP_NET_ADMIN and CAP_SYS_ADMIN`,
  );
}
