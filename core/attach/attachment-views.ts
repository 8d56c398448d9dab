import type { AttachmentView, AttachSpec } from '../backend';
import type { AttachmentRecord } from '../store/attachment-record';
import type { Attachment } from '../workload-service';

// The shapes of one stored attachment: what a backend is given to program or check it, and what the
// API shows. One place, so that a field added to the row reaches every verb.

/** The link-local gateways of the routed model: the node side answers for them on every host link. */
export const GATEWAY_V4 = '169.254.1.1';
export const GATEWAY_V6 = 'fe80::1';

export function gatewayOf(family: 4 | 6): string {
  return family === 4 ? GATEWAY_V4 : GATEWAY_V6;
}

/** What a backend needs to program the attachment, but the namespace handle the caller opens. */
export function toSpec(rec: AttachmentRecord): Omit<AttachSpec, 'netns'> {
  return {
    key: rec.key,
    workloadId: rec.workloadId,
    ifName: rec.ifName,
    netnsPath: rec.netnsPath,
    netnsInode: rec.netnsInode,
    ips: rec.ips,
    mtu: rec.mtu,
    network: rec.network,
    defaultRoute: rec.defaultRoute,
    routes: rec.routes,
  };
}

/** What a backend needs to check or remove the attachment: its spec and what was programmed. */
export function toView(rec: AttachmentRecord): AttachmentView {
  return { ...toSpec(rec), dataplane: rec.dataplane };
}

/** The API's view: the row without the namespace identity the daemon keeps for itself. */
export function publicView(rec: AttachmentRecord): Attachment {
  const {
    netnsInode: _inode,
    netnsDirDev: _dirDev,
    endpoint: _endpoint,
    mtuAsked: _asked,
    unfinished: _unfinished,
    ...rest
  } = rec;
  return rest;
}
