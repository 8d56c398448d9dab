// Everything attach, check and detach need to know about one attachment, worked out once from the
// spec and the options: the workload's interface, and the host end's name, label and group.

import * as crypto from 'node:crypto';
import { hostLinkAlias, hostLinkName } from './host-link-name';
import type { ResolvedLinuxBackendOptions } from './linux-backend-options';
import {
  workloadInterface,
  type WorkloadInterface,
  type WorkloadInterfaceInput,
} from '../interface/workload-side';

export interface AttachPlan extends WorkloadInterface {
  key: string;
  hostName: string;
  alias: string;
  linkGroup: number;
  /** Keep IPv6 link-local addresses on an IPv4-only link (the ipv6LinkLocal option). */
  ipv6LinkLocal: boolean;
}

/** What a plan is made from: an AttachSpec or a stored AttachmentView. */
export interface PlanInput extends WorkloadInterfaceInput {
  key: string;
}

export function planAttachment(input: PlanInput, opts: ResolvedLinuxBackendOptions): AttachPlan {
  return {
    ...workloadInterface(input),
    key: input.key,
    hostName: hostLinkName(input.key),
    alias: hostLinkAlias(input.key),
    linkGroup: opts.linkGroup,
    ipv6LinkLocal: opts.ipv6LinkLocal,
  };
}

/**
 * A random locally administered unicast MAC for the workload end. Choosing it ourselves (instead of
 * letting the kernel pick) means the result needs no GETLINK inside the workload namespace.
 */
export function randomMac(): string {
  const b = crypto.randomBytes(6);
  b[0] = ((b[0] ?? 0) & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}
