import { status } from '@grpc/grpc-js';
import { CidrError } from '../lib/cidr';
import { NetnsError, NetnsStateError } from '../lib/netns/netns-error';
import { NftablesError } from '../lib/nftables/libnftables';
import { ForeignPolicyTableError } from '../lib/nftables/policy-table';
import { VxlanDeviceError } from '../lib/overlay/vxlan-device';
import { NetlinkSocketError } from '../lib/rtnetlink/errors';

// Every failure that leaves the daemon carries a gRPC code and a sentence a person can act on. The CNI
// adapter maps the same codes to CNI error codes, so the code is the contract, not the message.

export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'RESOURCE_EXHAUSTED'
  | 'FAILED_PRECONDITION'
  | 'UNAVAILABLE'
  | 'DEADLINE_EXCEEDED'
  | 'INTERNAL';

export class WorkloadNetError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** True when repeating the same call later may succeed (CNI "try again later"). */
    readonly retryable = false,
  ) {
    super(message);
    this.name = 'WorkloadNetError';
  }

  get grpcCode(): status {
    return status[this.code];
  }
}

export const invalidArgument = (msg: string): WorkloadNetError =>
  new WorkloadNetError('INVALID_ARGUMENT', msg);
export const notFound = (msg: string): WorkloadNetError => new WorkloadNetError('NOT_FOUND', msg);
export const alreadyExists = (msg: string): WorkloadNetError => new WorkloadNetError('ALREADY_EXISTS', msg);
export const exhausted = (msg: string): WorkloadNetError =>
  new WorkloadNetError('RESOURCE_EXHAUSTED', msg, true);
export const unavailable = (msg: string): WorkloadNetError => new WorkloadNetError('UNAVAILABLE', msg, true);
export const deadlineExceeded = (msg: string): WorkloadNetError =>
  new WorkloadNetError('DEADLINE_EXCEEDED', msg, true);
export const failedPrecondition = (msg: string): WorkloadNetError =>
  new WorkloadNetError('FAILED_PRECONDITION', msg);
export const internal = (msg: string): WorkloadNetError => new WorkloadNetError('INTERNAL', msg);

/**
 * `err` as a WorkloadNetError when it is an error the daemon expects: its own, or one of lib/'s, which
 * carry no gRPC code and get theirs here, the one place that gives them one (message kept as is).
 * Undefined for anything else: an unexpected error, a bug.
 */
export function knownWorkloadNetError(err: unknown): WorkloadNetError | undefined {
  if (err instanceof WorkloadNetError) return err;
  // Bad text for an address or CIDR, a path that is no usable namespace: the caller's input.
  if (err instanceof CidrError || err instanceof NetnsError) return invalidArgument(err.message);
  if (err instanceof NetnsStateError) {
    return err.reason === 'no-own-namespace' ? failedPrecondition(err.message) : internal(err.message);
  }
  if (err instanceof NetlinkSocketError) {
    return err.reason === 'permission' ? failedPrecondition(err.message) : internal(err.message);
  }
  // A VXLAN device (or its port) that is another's: ours to refuse, theirs to remove.
  if (err instanceof VxlanDeviceError) return failedPrecondition(err.message);
  // NetworkPolicy's table: one of our name that is not ours is the operator's to remove; a transaction
  // the kernel refused changed nothing, and is tried again.
  if (err instanceof ForeignPolicyTableError) return failedPrecondition(err.message);
  if (err instanceof NftablesError) return unavailable(err.message);
  return undefined;
}

/** Any thrown value as a WorkloadNetError; unknown errors become INTERNAL with their message kept. */
export function asWorkloadNetError(err: unknown): WorkloadNetError {
  const known = knownWorkloadNetError(err);
  if (known) return known;
  const message = err instanceof Error ? err.message : String(err);
  return internal(message);
}
