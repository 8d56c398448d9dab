import { NetnsHandle } from '../../lib/netns/netns-handle';
import { NetnsSet, netnsPath } from './netns';
import { suiteResource } from './suite-resource';

// A socket opened inside a fresh test-owned namespace, for all the tests of a `describe`: the
// namespace is made and entered before them, and the socket, the handle and the namespace go after.

export interface SocketInNetns<S> {
  /** The namespace's name, for ip(8). */
  readonly name: string;
  readonly ns: NetnsHandle;
  readonly sock: S;
}

export function socketInNetns<S extends { close(): unknown }>(
  role: string,
  open: (ns: NetnsHandle) => S,
): SocketInNetns<S> {
  const pool = new NetnsSet('wnl-');
  return suiteResource<SocketInNetns<S>>(
    async () => {
      const name = pool.add(role).name;
      const ns = await NetnsHandle.open(netnsPath(name));
      return { name, ns, sock: open(ns) };
    },
    async (made) => {
      await made.sock.close();
      made.ns.close();
      pool.cleanup();
    },
  );
}
