import type { Hello } from '../../../proto/gen/workloadnet/dpu/v1/dpu';

// Whether an agent enforces NetworkPolicy for its ports: it must speak protocol version 4 and name the
// feature. An agent that does not still serves ports; a pod whose port it holds is refused (or, when
// the operator allows it, attached unenforced and named as such).

/** Agent feature: it enforces the PolicyObjects of its ports. */
export const FEATURE_NETWORK_POLICY = 'network-policy';
/** The first protocol version with NetworkPolicy. */
export const POLICY_PROTOCOL_VERSION = 4;

/** Undefined when a session speaking `version` after `hello` enforces; else why not, in words. */
export function policyRefusal(version: number, hello: Hello | undefined): string | undefined {
  if (version < POLICY_PROTOCOL_VERSION)
    return `speaks protocol version ${version || 'unknown'} (NetworkPolicy needs ${POLICY_PROTOCOL_VERSION})`;
  if (!hello?.capabilities?.features.includes(FEATURE_NETWORK_POLICY))
    return `does not name the feature "${FEATURE_NETWORK_POLICY}"`;
  return undefined;
}
