// The policy program an nftables ruleset enforces, as the toolkit sees it: each isolated pod's rules
// per direction and the address sets they name. The core's compiled program (core/policy-dataplane.ts)
// is assignable to it as it is, so the host's dataplane and the DPU simulator, which imports only lib/,
// render the same program through the same code. Checked whole before anything is written: a malformed
// program is refused in words and changes nothing.

import { CidrError, parseCidr } from '../cidr';

export type NftPolicyProtocol = 'TCP' | 'UDP' | 'SCTP';

export interface NftPortMatch {
  protocol: NftPolicyProtocol;
  /** Absent: every port of the protocol. */
  port?: number;
  /** With `port`: the last port of the range. */
  endPort?: number;
}

export interface NftPolicyRule {
  /** Address sets (by program name); absent: any address; empty: matches nothing. */
  sets?: readonly string[];
  /** Absent: every protocol and port; empty: matches nothing. */
  ports?: readonly NftPortMatch[];
}

export interface NftDirectionPolicy {
  rules: readonly NftPolicyRule[];
}

export interface NftPodPolicy {
  key: string;
  /** The host-side interface its traffic crosses. */
  hostIf: string;
  /** Absent: ingress not isolated. */
  ingress?: NftDirectionPolicy;
  /** Absent: egress not isolated. */
  egress?: NftDirectionPolicy;
}

export interface NftPolicyProgram {
  /** Set name → prefixes (CIDR text, either family, no overlaps). */
  sets: ReadonlyMap<string, readonly string[]>;
  pods: ReadonlyMap<string, NftPodPolicy>;
}

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
export function checkPod(pod: NftPodPolicy, sets: ReadonlyMap<string, readonly string[]>): void {
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

function checkPort(where: string, p: NftPortMatch): void {
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
