// What can go wrong with a network namespace, as values callers branch on. These are the toolkit's own
// errors, with no gRPC code: the daemon gives them theirs in one place (core/errors.ts), entry points
// answer them in their own terms (CNI: code 4 for a NetnsError).

/** Why a path is not usable as a network namespace. */
export type NetnsFailure = 'missing' | 'not-a-netns' | 'protected' | 'permission' | 'io';

/**
 * A path that cannot be used as a network namespace, and why. Whatever the reason (even a namespace
 * root may not open, PID 1's inside a sandbox), it is not one to attach a workload to: the caller's
 * input is at fault, never the daemon.
 */
export class NetnsError extends Error {
  constructor(
    readonly reason: NetnsFailure,
    readonly path: string,
    message: string,
  ) {
    super(message);
    this.name = 'NetnsError';
  }

  /** The namespace does not exist (any more): the one test for "already gone". */
  get notFound(): boolean {
    return this.reason === 'missing';
  }
}

/**
 * This process cannot act in a namespace, whatever the path: its own namespace could not be opened at
 * start-up (`no-own-namespace`: the host is at fault), or a handle was used after it was closed
 * (`closed`: a bug in the caller).
 */
export class NetnsStateError extends Error {
  constructor(
    readonly reason: 'no-own-namespace' | 'closed',
    message: string,
  ) {
    super(message);
    this.name = 'NetnsStateError';
  }
}
