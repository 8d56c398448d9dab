import type { AllocatedIp } from '../ipam/ip-allocator';
import type { Netns } from '../../lib/netns/netns-handle';
import type { AttachmentRecord } from '../store/attachment-record';
import { gatewayOf } from './attachment-views';
import type { AttachRequest } from './validation';

// The row an Attach writes: the validated request, the namespace it was found in, the addresses taken
// and the routing chosen, as one record. Its own file because the row's fields are the store's
// contract with every later step (detach, reconcile, GC, the leak sweep), apart from the flow that
// decides them (orchestrator.ts).

export function newRecord(
  req: AttachRequest & { mtu: number; mtuAsked: boolean },
  netns: Pick<Netns, 'inode' | 'dirDev'>,
  allocated: AllocatedIp[],
  backend: string,
  defaultRoute: boolean,
  routes: string[] | undefined,
): AttachmentRecord {
  return {
    key: req.key,
    workloadId: req.workloadId,
    ifName: req.ifName,
    netnsPath: req.netnsPath,
    netnsInode: netns.inode,
    ...(netns.dirDev !== undefined ? { netnsDirDev: netns.dirDev } : {}),
    containerId: req.containerId,
    pod: req.pod,
    ips: allocated.map((a) => ({
      family: a.family,
      address: a.address,
      gateway: gatewayOf(a.family),
    })),
    mtu: req.mtu,
    // The call's own MTU is kept; one from the network follows it (core/reconcile/mtu-alignment.ts).
    ...(req.mtuAsked ? { mtuAsked: true } : {}),
    backend,
    network: req.network,
    defaultRoute,
    ...(routes ? { routes } : {}),
    dns: req.dns,
    origin: req.origin,
    state: 'ready',
    createdAt: new Date().toISOString(),
  };
}
