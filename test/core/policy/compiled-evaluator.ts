// What a dataplane does with a compiled program, in a few lines: a packet leaves a local pod that is
// egress-isolated only if one of its egress rules matches the destination, and enters a local pod
// that is ingress-isolated only if one of its ingress rules matches the source. A rule matches when
// the peer's address is in one of its sets (or it names none) and the port matches.

import type { CompiledPolicy, CompiledRule, PodPolicy } from '../../../core/policy-dataplane';
import type { PolicyProtocol } from '../../../core/policy-source';
import { inCidr } from '../../support/policy-reference';

function ruleMatches(
  program: CompiledPolicy,
  rule: CompiledRule,
  peerIp: string,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  const inSets =
    rule.sets === undefined ||
    rule.sets.some((s) => (program.sets.get(s) ?? []).some((c) => inCidr(peerIp, c)));
  const onPort =
    rule.ports === undefined ||
    rule.ports.some(
      (p) =>
        p.protocol === protocol &&
        (p.port === undefined || (port >= p.port && port <= (p.endPort ?? p.port))),
    );
  return inSets && onPort;
}

/** The program of the attachment holding `ip`, if any. */
export function podHolding(program: CompiledPolicy, ip: string): PodPolicy | undefined {
  for (const p of program.pods.values()) if (p.ips.includes(ip)) return p;
  return undefined;
}

/** One end's program allows it: for Ingress the destination's, for Egress the source's. */
export function compiledDirection(
  program: CompiledPolicy,
  type: 'Ingress' | 'Egress',
  fromIp: string,
  toIp: string,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  const [holderIp, peerIp] = type === 'Ingress' ? [toIp, fromIp] : [fromIp, toIp];
  const pod = podHolding(program, holderIp);
  const side = type === 'Ingress' ? pod?.ingress : pod?.egress;
  return !side || side.rules.some((r) => ruleMatches(program, r, peerIp, protocol, port));
}

/** A packet as the program sees it: its addresses, protocol and destination port. */
type IpFlow = [fromIp: string, toIp: string, protocol: PolicyProtocol, port: number];

/** Both ends' programs allow it. */
export function compiledAllows(program: CompiledPolicy, ...flow: IpFlow): boolean {
  return compiledDirection(program, 'Egress', ...flow) && compiledDirection(program, 'Ingress', ...flow);
}
