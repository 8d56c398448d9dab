// The policy program (lib/policy-program.ts) as the nftables renderer checks it: whole, before anything
// is written; a malformed program is refused in words and changes nothing.

import { CidrError, parseCidr } from '../cidr';
import type { PortMatch, ProgramPod } from '../policy-program';

export type {
  PolicyPortProtocol as NftPolicyProtocol,
  PortMatch as NftPortMatch,
  PolicyRule as NftPolicyRule,
  DirectionPolicy as NftDirectionPolicy,
  ProgramPod as NftPodPolicy,
  PolicyProgram as NftPolicyProgram,
} from '../policy-program';

/** A program that cannot be enforced as given: nothing was changed. */
export class PolicyProgramError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PolicyProgramError';
  }
}

/** IFNAMSIZ - 1, and no character that could end nft's quoted string or mean a path. */
const IFNAME = /^[^\s"'/\\]{1,15}$/;
const PROTOCOLS: ReadonlySet<string> = new Set(['TCP', 'UDP', 'SCTP']);

/** Canonical prefixes of one set, per family; throws PolicyProgramError on a malformed one. */
export function setPrefixes(name: string, prefixes: readonly string[]): { v4: string[]; v6: string[] } {
  const v4: string[] = [];
  const v6: string[] = [];
  for (const p of prefixes) {
    let c;
    try {
      c = parseCidr(p);
    } catch (err) {
      if (err instanceof CidrError) throw new PolicyProgramError(`address set ${name}: ${err.message}`);
      throw err;
    }
    (c.family === 4 ? v4 : v6).push(c.text);
  }
  return { v4, v6 };
}

/** Refuses, in words, a pod whose interface name, sets or ports cannot be written as given. */
export function checkPod(pod: ProgramPod, sets: ReadonlyMap<string, readonly string[]>): void {
  if (!IFNAME.test(pod.hostIf) || Buffer.byteLength(pod.hostIf) > 15)
    throw new PolicyProgramError(
      `pod ${pod.key}: host interface name ${JSON.stringify(pod.hostIf)} is not a Linux interface name`,
    );
  for (const [direction, policy] of [
    ['ingress', pod.ingress],
    ['egress', pod.egress],
  ] as const) {
    for (const rule of policy?.rules ?? []) {
      for (const s of rule.sets ?? [])
        if (!sets.has(s))
          throw new PolicyProgramError(
            `pod ${pod.key}: ${direction} rule names address set ${s}, which the program lacks`,
          );
      for (const p of rule.ports ?? []) checkPort(`pod ${pod.key}: ${direction} rule`, p);
    }
  }
}

function checkPort(where: string, p: PortMatch): void {
  if (!PROTOCOLS.has(p.protocol))
    throw new PolicyProgramError(`${where}: unknown protocol ${String(p.protocol)}`);
  const valid = (n: number | undefined): boolean =>
    n === undefined || (Number.isInteger(n) && n >= 1 && n <= 65535);
  if (!valid(p.port) || !valid(p.endPort))
    throw new PolicyProgramError(`${where}: ports must be integers 1-65535, not ${p.port}-${p.endPort}`);
  if (p.endPort !== undefined && (p.port === undefined || p.endPort < p.port))
    throw new PolicyProgramError(
      `${where}: endPort ${p.endPort} needs a port at or below it (port ${p.port})`,
    );
}
