// Who outside the daemon hears whether it is ready: the daemon looks at its Status every 2 s (the gRPC
// health service's serving state) and tells every listener bound here, so that a source can tell its
// control plane (the Kubernetes Node's NetworkUnavailable condition) without a loop of its own.

export interface ReadinessListener {
  /** Called after every look at Status, ready or not; must not throw, and must not wait. */
  readinessChecked(ready: boolean): void;
}

/** inversify identifier of the readiness listeners; multi-bound, and none is fine. */
export const READINESS_LISTENER = Symbol.for('workloadnet.ReadinessListener');
