import { asWorkloadNetError, type ErrorCode } from '../../core/errors';

// CNI error codes (spec "Error codes"). 1–99 are reserved by the spec; 100+ belong to the plugin.
export const CniErrorCode = {
  INCOMPATIBLE_VERSION: 1,
  UNSUPPORTED_FIELD: 2,
  UNKNOWN_CONTAINER: 3,
  INVALID_ENVIRONMENT: 4,
  IO_FAILURE: 5,
  DECODING_FAILURE: 6,
  INVALID_NETWORK_CONFIG: 7,
  TRY_AGAIN_LATER: 11,
  PLUGIN_NOT_AVAILABLE: 50,
  LIMITED_CONNECTIVITY: 51,
  /** Plugin-specific: CHECK found the dataplane differing from what was attached. */
  ATTACHMENT_DRIFT: 100,
  /** Same number libcni's skeleton uses for an untyped plugin error. */
  INTERNAL: 999,
} as const;

export type CniErrorCodeValue = (typeof CniErrorCode)[keyof typeof CniErrorCode];

/** A failure with the code and text a runtime shows to the operator. */
export class CniError extends Error {
  constructor(
    readonly code: CniErrorCodeValue,
    message: string,
    readonly details = '',
  ) {
    super(message);
    this.name = 'CniError';
  }
}

/** The JSON a plugin prints on stdout when it fails. */
export function formatCniError(err: CniError, cniVersion: string): string {
  const out: Record<string, string | number> = { cniVersion, code: err.code, msg: err.message };
  // libcni's Error type marks details omitempty; an empty string only adds noise to runtime logs.
  if (err.details !== '') out.details = err.details;
  return JSON.stringify(out);
}

/** Which CNI verb failed, because the same service code means different things to different verbs. */
export type CniVerbContext = 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'GC';

// INVALID_ARGUMENT becomes 7: the handler validates every environment variable itself (answering 4)
// before it calls the service, so what the service still rejects came from the network config.
// ALREADY_EXISTS is 7 too: the key (container, ifname) is taken by another netns, which only a config or
// runtime mix-up produces, and retrying cannot fix it.
const BY_CODE: Record<ErrorCode, CniErrorCodeValue> = {
  INVALID_ARGUMENT: CniErrorCode.INVALID_NETWORK_CONFIG,
  NOT_FOUND: CniErrorCode.UNKNOWN_CONTAINER,
  ALREADY_EXISTS: CniErrorCode.INVALID_NETWORK_CONFIG,
  RESOURCE_EXHAUSTED: CniErrorCode.TRY_AGAIN_LATER,
  UNAVAILABLE: CniErrorCode.TRY_AGAIN_LATER,
  DEADLINE_EXCEEDED: CniErrorCode.TRY_AGAIN_LATER,
  FAILED_PRECONDITION: CniErrorCode.INTERNAL,
  INTERNAL: CniErrorCode.INTERNAL,
};

/**
 * Translate whatever the service threw into a CNI error. The workloadnet code goes into `details` so
 * that an operator reading a kubelet event can match it with the daemon's logs and gRPC answers.
 */
export function cniErrorFromService(err: unknown, verb: CniVerbContext): CniError {
  if (err instanceof CniError) return err;
  const wn = asWorkloadNetError(err);
  let code: CniErrorCodeValue = BY_CODE[wn.code];
  // The service marks transient failures; whatever their code, the runtime should just retry.
  if (wn.retryable) code = CniErrorCode.TRY_AGAIN_LATER;
  // STATUS asks "can you serve ADD right now?": an unavailable backend is the spec's "plugin not
  // available" answer rather than "try again".
  if (verb === 'STATUS' && (wn.code === 'UNAVAILABLE' || wn.code === 'FAILED_PRECONDITION')) {
    code = CniErrorCode.PLUGIN_NOT_AVAILABLE;
  }
  let message = wn.message;
  if (wn.code === 'ALREADY_EXISTS') {
    // Either this container and interface are attached elsewhere, or the interface name is taken in
    // the namespace: the hint covers both.
    message = `${wn.message} (DEL the earlier attachment of this container and interface, or remove the conflicting interface)`;
  }
  return new CniError(code, message, `workloadnet ${wn.code}`);
}
