// What an attach must pass before it answers, besides the backend's programming: NetworkPolicy's rules
// for the pod (core/policy implements it). An interface of the attach flow's own, so that the flow does
// not know what the gate enforces, and the gate does not import the flow.
//
// The three steps keep the rule of the flow (a failed call leaves nothing behind) and close the window
// between a pod's first packet and its rules:
// - admit() before anything changes: what the gate needs to know of the pod (its labels) is known, or
//   the call is refused, retryably, with nothing allocated;
// - enforce() while the backend programs: the attach answers only once both are done, and fails (its
//   programming undone) when the gate's part cannot be put in force;
// - release() whenever the attachment goes (detach, a failed attach, GC, the leak sweep), before its
//   addresses go back to the pool: a reused address never inherits the old pod's place in a set.

import type { AttachmentRecord } from '../store/attachment-record';

/** The attach as the gate sees it before anything is allocated. */
export interface GateCall {
  key: string;
  workloadId: string;
  network: string;
  pod?: { uid?: string; namespace?: string; name?: string };
}

export interface AttachGate {
  /**
   * What the gate learnt of the call (passed back to enforce), or undefined when the call is none of
   * its business (no pod identity, a network it does not cover). Throws a WorkloadNetError, in words,
   * to refuse the call before anything changes.
   */
  admit(call: GateCall): Promise<unknown>;
  /** Puts the gate's part for the recorded attachment in force; throws to fail the attach. */
  enforce(admitted: unknown, record: AttachmentRecord): Promise<void>;
  /** The attachment is gone or never finished: its part is removed. Never throws. */
  release(key: string): Promise<void>;
}
