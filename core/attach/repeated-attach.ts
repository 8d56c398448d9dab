import { DEFAULT_NETWORK } from '../config';
import { alreadyExists } from '../errors';
import type { Netns } from '../../lib/netns/netns-handle';
import type { AttachmentRecord } from '../store/attachment-record';
import type { AttachRequest } from './validation';

/** A repeated Attach: the same namespace gets the recorded result; another one is refused. */
export function sameAttachment(
  existing: AttachmentRecord,
  req: AttachRequest,
  netns: Netns,
): AttachmentRecord {
  const network = existing.network || DEFAULT_NETWORK;
  if (network !== req.network)
    throw alreadyExists(
      `workload ${req.workloadId} already has ${req.ifName} on network ${network}; detach it before attaching it to network ${req.network}`,
    );
  if (existing.netnsPath === req.netnsPath && existing.netnsInode === netns.inode) return existing;
  throw alreadyExists(
    `workload ${req.workloadId} is already attached as ${req.ifName} in ${existing.netnsPath}; detach it before attaching it to another namespace`,
  );
}
