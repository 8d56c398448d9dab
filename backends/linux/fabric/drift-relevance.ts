// Which kernel notifications may mean drift of the fabric's objects. Its own file because it is the
// monitor's filter: a notification that passes costs a converge, one that is dropped wrongly leaves
// drift until the periodic pass, and our own changes (known before they are sent) must not count.

import {
  RTM_DELADDR,
  RTM_DELLINK,
  RTM_DELNEIGH,
  RTM_DELROUTE,
  RTM_NEWLINK,
  RTM_NEWNEIGH,
  RTM_NEWROUTE,
  RTPROT_WORKLOADNET,
} from '../../../lib/rtnetlink';
import { directNeighbourChanged, type DirectSources } from './direct-sources';
import { KERNEL_EVENTS_LOST, type KernelEvent } from './drift-monitor';

/** What of the fabric's state a notification is compared with. */
export interface DriftWatch {
  /** Our VXLAN device's ifindex, while there is one. */
  vxlanIndex: number | undefined;
  /** The uplink's ifindex, once prepared. */
  uplinkIndex: number | undefined;
  /** What the last apply put in (object id → fingerprint). */
  programmed: ReadonlyMap<string, string>;
  /** What the source filter admits on hybrid's direct path, as last applied. */
  direct: DirectSources | undefined;
  /** The device carries gateway keys of ours. */
  keysOnDevice: boolean;
}

/**
 * Whether a notification may mean drift: one of the objects we put in is gone, a route of ours we
 * did not put in appeared, or our device went away. Our own changes (known in `programmed` before
 * they are sent) do not trigger a converge.
 */
export function concernsFabric(e: KernelEvent, w: DriftWatch): boolean {
  const vx = w.vxlanIndex;
  switch (e.type) {
    case KERNEL_EVENTS_LOST:
      return true;
    case RTM_DELROUTE:
      return e.protocol === RTPROT_WORKLOADNET && e.id !== undefined && w.programmed.has(e.id);
    case RTM_NEWROUTE:
      return e.protocol === RTPROT_WORKLOADNET && e.id !== undefined && !w.programmed.has(e.id);
    case RTM_DELNEIGH:
      return vx !== undefined && e.ifindex === vx && e.id !== undefined && w.programmed.has(e.id);
    case RTM_NEWNEIGH:
      return directNeighbourChanged(w.direct, e);
    case RTM_DELLINK:
      return vx !== undefined && e.ifindex === vx;
    case RTM_NEWLINK:
      // The uplink's MTU may have changed (followUplinkMtu).
      return e.ifindex !== undefined && e.ifindex === w.uplinkIndex;
    case RTM_DELADDR:
      return vx !== undefined && e.ifindex === vx && w.keysOnDevice;
    default:
      return false;
  }
}
