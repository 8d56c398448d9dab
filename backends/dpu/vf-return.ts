import type { Logger } from '../../core/logger';
import type { Netns } from '../../lib/netns/netns-handle';
import { NetlinkError, getLink, setLinkRequest, type NetlinkSocket } from '../../lib/rtnetlink';

// How a VF that was in a workload goes back to the host: the mark it carries while it is there (which
// says the daemon moved it in, and the name it came with), and the move back under that name, or under
// a name of its own when another link holds that one now. Its own file: Detach, a failed Attach and the
// return of a VF an attach cut short all end here, and all must agree on the mark and the names.

/**
 * The mark a VF carries while it is in a workload (IFLA_IFALIAS; it survives the move): it says the
 * link is one this daemon moved in, and the name it came with. Set before the move, so that a daemon
 * killed before it recorded the attach can tell the VF from the workload's own links.
 */
const VF_ALIAS_PREFIX = 'workloadnet-vf:';

export function vfAlias(endpoint: string): string {
  return VF_ALIAS_PREFIX + endpoint;
}

/** The name a marked VF came with; undefined when the link carries no mark of ours. */
export function endpointOfAlias(alias: string | undefined): string | undefined {
  if (!alias?.startsWith(VF_ALIAS_PREFIX)) return undefined;
  const name = alias.slice(VF_ALIAS_PREFIX.length);
  // A name the kernel would take back (IFNAMSIZ, no '/' or blanks); anything else goes back under one of its own.
  return /^[^/\s:]{1,15}$/.test(name) ? name : '';
}

/** The name a returned endpoint takes when its own is another link's: from its index, unique there. */
export function returnName(ifIndex: number): string {
  return `wnvf${ifIndex}`;
}

const isNameTaken = (err: unknown): boolean => err instanceof NetlinkError && err.code === 'EEXIST';

/**
 * Renames the netdev back and returns it to the host namespace. The name it came with may be another
 * link's by now (a DPU that rebooted re-creates its VFs under names of its choosing): the link is
 * ours by its index, never by that name, so it goes back under a name of its own (returnName) rather
 * than fail or take the other link's.
 */
export async function returnVf(
  endpoint: string,
  index: number,
  wsock: NetlinkSocket,
  hostNs: Netns,
  log: Logger,
): Promise<void> {
  // Its mark goes: back in the host it is the agent's VF again.
  await wsock.request(setLinkRequest({ index }, { up: false, alias: '' }));
  const link = await getLink(wsock, { index });
  // Rename inside the workload namespace first: a move keeps the current name unless it clashes, and
  // "eth0" would clash with, or worse masquerade as, a host interface.
  let name = link?.name ?? endpoint;
  if (name !== endpoint) name = await rename(wsock, index, endpoint, log);
  try {
    await wsock.request(setLinkRequest({ index }, { netnsFd: hostNs.fd }));
  } catch (err) {
    if (!isNameTaken(err) || name === returnName(index)) throw err;
    // The host holds a link of that name: ours goes back under its own.
    await rename(wsock, index, returnName(index), log, endpoint);
    await wsock.request(setLinkRequest({ index }, { netnsFd: hostNs.fd }));
  }
}

/** Names link `index` `name`, or returnName(index) when another link holds `name`; the name it got. */
async function rename(
  wsock: NetlinkSocket,
  index: number,
  name: string,
  log: Logger,
  taken?: string,
): Promise<string> {
  if (taken === undefined) {
    try {
      await wsock.request(setLinkRequest({ index }, { name }));
      return name;
    } catch (err) {
      if (!isNameTaken(err)) throw err;
    }
  }
  const own = returnName(index);
  log.warn(
    { endpoint: taken ?? name, ifIndex: index, returnedAs: own },
    'the name the endpoint came with belongs to another link now; returning it under a name of its own',
  );
  await wsock.request(setLinkRequest({ index }, { name: own }));
  return own;
}
