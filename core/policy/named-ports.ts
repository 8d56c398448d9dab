// A policy port given by name stands for the number of the destination pod's container port of that
// name and protocol: for ingress the local pod itself, for egress each peer pod in turn.

import type { PolicyPod, PolicyProtocol } from '../policy-source';

/** The number `name` stands for on `pod`, or undefined when the pod has no such port for `protocol`. */
export function resolveNamedPort(pod: PolicyPod, name: string, protocol: PolicyProtocol): number | undefined {
  for (const p of pod.namedPorts) {
    if (p.name === name && p.protocol === protocol) return p.port;
  }
  return undefined;
}
