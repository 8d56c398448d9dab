// What a dataplane does with a compiled program, in a few lines: a packet leaves a local pod that is
// egress-isolated only if one of its egress rules matches the destination, and enters a local pod
// that is ingress-isolated only if one of its ingress rules matches the source. A rule matches when
// the peer's address is in one of its sets (or it names none) and the port matches.

import type { CompiledPolicy, CompiledRule, PodPolicy } from '../../../core/policy-dataplane';
import type { PolicyProtocol } from '../../../core/policy-source';
import { parseAddress } from '../../../lib/cidr';

function inPrefix(ip: string, cidr: string): boolean {
  const [net, len] = cidr.split('/') as [string, string];
  const a = parseAddress(ip);
  const n = parseAddress(net);
  if (a.family !== n.family) return false;
  const shift = BigInt((a.family === 4 ? 32 : 128) - Number(len));
  return a.value >> shift === n.value >> shift;
}

function ruleMatches(
  program: CompiledPolicy,
  rule: CompiledRule,
  peerIp: string,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  const inSets =
    rule.sets === undefined ||
    rule.sets.some((s) => (program.sets.get(s) ?? []).some((c) => inPrefix(peerIp, c)));
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

export function compiledEgress(
  program: CompiledPolicy,
  fromIp: string,
  toIp: string,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  const egress = podHolding(program, fromIp)?.egress;
  return !egress || egress.rules.some((r) => ruleMatches(program, r, toIp, protocol, port));
}

export function compiledIngress(
  program: CompiledPolicy,
  fromIp: string,
  toIp: string,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  const ingress = podHolding(program, toIp)?.ingress;
  return !ingress || ingress.rules.some((r) => ruleMatches(program, r, fromIp, protocol, port));
}

export function compiledAllows(
  program: CompiledPolicy,
  fromIp: string,
  toIp: string,
  protocol: PolicyProtocol,
  port: number,
): boolean {
  return (
    compiledEgress(program, fromIp, toIp, protocol, port) &&
    compiledIngress(program, fromIp, toIp, protocol, port)
  );
}
