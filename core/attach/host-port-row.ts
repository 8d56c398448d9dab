import type { AttachmentRecord } from '../store/attachment-record';

// The host port's attachment (core/host-port/host-port.ts): the node's own network namespace attached by
// the daemon itself to a network on the DPUs, so that the host reaches the overlay through a DPU. It is
// recorded like any attachment, under a workload id no caller may use. Its namespace is the node's,
// alive as long as the node is, so nothing that reclaims attachments by their namespace (the leak
// sweep, the start-up reconcile's release, a keep-list GC that does not name it) takes it: the host
// port's own controller decides about it.

/** The workload id the host port is recorded under; Attach refuses it from callers. */
export const HOST_PORT_WORKLOAD_ID = 'workloadnet-host-port';
/** Its interface in the host namespace. */
export const HOST_PORT_IF_NAME = 'wn-host0';
/** Its origin, as List shows it. */
export const HOST_PORT_ORIGIN = 'host-port';

/** Whether a stored attachment is the host port. */
export function isHostPort(rec: Pick<AttachmentRecord, 'workloadId' | 'origin'>): boolean {
  return rec.workloadId === HOST_PORT_WORKLOAD_ID && rec.origin === HOST_PORT_ORIGIN;
}
