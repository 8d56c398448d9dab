// How a failed kernel request becomes the error the daemon reports: a code chosen by errno (retryable
// when the kernel was only busy or short of buffers) and words that say what was being done. Its own
// file because attach, detach and the MTU change all report this way, on either attach path.

import { WorkloadNetError, type ErrorCode } from '../../core/errors';
import { NetlinkError } from '../../lib/rtnetlink/errors';
import type { AttachStep } from './attach-exchange';
import type { AttachPlan } from './attach-plan';

/** What an attach was doing at `step`, as its errors say. */
export function stepDescription(step: AttachStep, plan: AttachPlan, netnsPath: string): string {
  switch (step) {
    case 'socket':
      return `opening a netlink socket in ${netnsPath}`;
    case 'veth':
      return 'creating the veth pair';
    case 'workload':
      return `configuring ${plan.ifName} in ${netnsPath}`;
    case 'host':
      return `configuring host interface ${plan.hostName}`;
    case 'alias':
      return `labelling host interface ${plan.hostName}`;
  }
}

/** Runs one named step; kernel errors become WorkloadNetErrors that say what was being done. */
export async function step<T>(key: string, what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof NetlinkError) throw fromNetlink(err, `attach ${key}: ${what}`);
    throw err;
  }
}

export function fromNetlink(err: NetlinkError, context: string): WorkloadNetError {
  const codes: Record<string, ErrorCode> = {
    EPERM: 'FAILED_PRECONDITION',
    EACCES: 'FAILED_PRECONDITION',
    ENOBUFS: 'UNAVAILABLE',
    ENOMEM: 'RESOURCE_EXHAUSTED',
    ETIMEDOUT: 'UNAVAILABLE',
    EBUSY: 'UNAVAILABLE',
  };
  const code = codes[err.code] ?? 'INTERNAL';
  return new WorkloadNetError(code, `${context}: ${err.message}`, code === 'UNAVAILABLE');
}
