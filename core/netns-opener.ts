// The seam through which the core opens a workload's namespace: the kernel's (lib/netns) in the
// daemon, stand-ins in tests that run without root.

import {
  NetnsHandle,
  netnsPresence,
  netnsStillPresent,
  type Netns,
  type NetnsPresence,
} from '../lib/netns/netns-handle';

/** How the core opens a workload's namespace; injected, so that tests without root can stand in. */
export interface NetnsOpener {
  /** Opens and validates a workload's namespace (see NetnsHandle.open with `workload`). */
  openWorkload(netnsPath: string): Promise<Netns>;
  /**
   * Opens the node's own namespace, which the daemon attaches its host port to (core/host-port/host-port.ts):
   * the path given, or the daemon's own when it is empty. Not refused as a caller's Attach of it is.
   */
  openHost(netnsPath: string): Promise<Netns>;
  /** Whether `netnsPath` still names the namespace recorded as `inode`. */
  stillPresent(netnsPath: string, inode: number): Promise<boolean>;
  /** What `netnsPath` shows of the namespace recorded as `inode` (reconcile, the leak sweep). */
  presence(netnsPath: string, inode: number): Promise<NetnsPresence>;
}

/** inversify identifier of the NetnsOpener. */
export const NETNS_OPENER = Symbol.for('workloadnet.NetnsOpener');

/** The opener the daemon uses: real namespaces. */
export const kernelNetnsOpener: NetnsOpener = {
  openWorkload: (netnsPath) => NetnsHandle.open(netnsPath, { workload: true }),
  openHost: async (netnsPath) => (netnsPath ? NetnsHandle.open(netnsPath) : NetnsHandle.own()),
  stillPresent: (netnsPath, inode) => netnsStillPresent(netnsPath, inode),
  presence: (netnsPath, inode) => netnsPresence(netnsPath, inode),
};
