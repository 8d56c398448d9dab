import { AF_INET, AF_INET6, newNeighbourRequest, type NetlinkSocket } from '../../lib/rtnetlink';
import type { WorkloadInterface } from '../interface/workload-side';

// A workload's VF just plumbed asks for its gateway at once (an ARP request, an IPv6 neighbour
// solicitation), which tells the DPU behind it the workload's MAC. Without it the DPU learns it only
// when it resolves the workload's address itself: after a DPU reboot it may have tried while the
// re-created VF was still in the host namespace, and the kernel tries again a second later
// (retrans_time), all that time holding every packet to the workload. The request is the kernel's own
// (RTM_NEWNEIGH with NTF_USE starts resolution of the entry as a packet would); it changes no state
// but the neighbour cache.

/** ndm_flags NTF_USE: resolve the entry as if a packet used it. */
const NTF_USE = 0x01;

/** Has the workload's interface resolve its gateways now; best effort, never throws. */
export async function nudgeGateways(
  wsock: NetlinkSocket,
  index: number,
  iface: WorkloadInterface,
): Promise<void> {
  const gateways: Array<[typeof AF_INET | typeof AF_INET6, string]> = [];
  if (iface.gatewayV4) gateways.push([AF_INET, iface.gatewayV4]);
  if (iface.gatewayV6) gateways.push([AF_INET6, iface.gatewayV6]);
  for (const [family, dst] of gateways) {
    await wsock
      .request(
        newNeighbourRequest({ family, ifindex: index, dst, state: 0, flags: NTF_USE }, { replace: true }),
      )
      .catch(() => undefined);
  }
}
