// The nftables ruleset that enforces a policy program (policy-program.ts), as plain values the diff
// (policy-diff.ts) compares with what the kernel holds:
//
//   table inet workloadnet_policy            marked ours by its comment
//     chain forward                          filter hook forward, policy accept:
//       ct state established,related accept   replies and flows already allowed go on at once
//       iifname vmap @egress_pods            pod's host interface → jump pe_<rules>
//       oifname vmap @ingress_pods           pod's host interface → jump pi_<rules>
//     chain pi_<digest of rules> / pe_<…>    one per direction and distinct rules, shared by every pod
//                                            that has them: a rule per allowed (address set × port)
//                                            ending in `return`, then `oifname @ingress_denied drop`
//                                            (iifname, egress_denied), then `drop`
//     set ingress_denied / egress_denied     the isolated pods' host interfaces, each element
//                                            counting the packets its pod's chain dropped
//     set s_<hash of name>_v4 / _v6          one per program set and family, holding only host
//                                            addresses: a plain hash set
//     set s_<hash of name>_n4 / _n6          the same for a set with real prefixes (ipBlocks):
//                                            flags interval
//
// A chain is named for its rules, not for a pod: the replicas of a Deployment, selected by the same
// policies, share one chain, so a pod whose rules another pod already has is three elements (the two
// maps, the denied set) and its addresses in the sets that select it: no chain, and no libnftables,
// whose cache rebuild costs milliseconds per command at a thousand chains (policy-table.ts writes such
// a change over nf_tables netlink). A pod whose rules change jumps to another chain, in the transaction
// that makes it; a chain no pod jumps to any more goes last.
//
// A set's kind follows from its content and is part of its name. Hash sets are the rule: every
// pod-selector set holds /32s and /128s, and libnftables, which rebuilds its cache before every command,
// dumps the elements of every interval set in the table to do it, so a thousand interval sets cost tens
// of milliseconds per change. A set whose content needs the other kind (rare: the compiler names sets for
// their selector, and an ipBlock's content never changes) is a new set under the other name, and the
// chains that named the old one are rewritten in the same transaction before it goes.
//
// Allowed traffic *returns* rather than accepts: pod-to-pod traffic on one node crosses the sender's
// egress chain and then the receiver's ingress chain in the same forward pass, and both must allow it.
// Traffic from the node itself to its pods (kubelet probes) goes through output, not forward, so it is
// allowed by construction; so is anything a pod sends to the node. Interfaces are matched by name, so
// a pod's chains can be in force before its veth exists.
//
// Each rule carries a comment `<digest>:<index>/<count>`, the digest covering the whole chain: reading
// the kernel back (policy-listing.ts) tells an intact chain from one changed by hand without
// re-deriving nft's canonical form of every rule.
//
// Denied packets are counted by the elements of the two `*_denied` sets (`counter` on the set: a lookup
// that matches counts on its element), not by a named counter object per chain: libnftables loads every
// named object into its cache before any `add rule` or `add element`, and two thousand counters cost
// ~20 ms per change, where two thousand chains or sets cost ~1.5 ms. An element outlives its pod's
// chain being rewritten for a policy change, so the count does too; a pod missing from its set (drift)
// is still dropped, by the chain's last rule, only not counted until the element is put back.

import { createHash } from 'node:crypto';
import {
  PolicyProgramError,
  checkPod,
  setPrefixes,
  type NftPodPolicy,
  type NftPolicyProgram,
  type NftPolicyRule,
} from './policy-program';

export const POLICY_TABLE = 'workloadnet_policy';
/** The table's comment: only a table carrying it is ours to change or delete. */
export const POLICY_MARK = "workloadnet: NetworkPolicy of this node's pods";
export const TABLE_REF = `inet ${POLICY_TABLE}`;
export const FORWARD_CHAIN = 'forward';
export const EGRESS_MAP = 'egress_pods';
export const INGRESS_MAP = 'ingress_pods';
export const EGRESS_DENIED = 'egress_denied';
export const INGRESS_DENIED = 'ingress_denied';
/** The sets of interfaces (with a counter per element), as opposed to the verdict maps. */
export const DENIED_SETS: ReadonlySet<string> = new Set([EGRESS_DENIED, INGRESS_DENIED]);

export type PolicyDirection = 'ingress' | 'egress';

export interface RenderedChain {
  digest: string;
  /** The nft sets its rules name: a rendering naming a set the program no longer has is stale. */
  sets: readonly string[];
  /** Each rule's text after `add rule <table> <chain>`, its comment included. */
  rules: string[];
  /** For a pods' chain: which direction. */
  direction?: PolicyDirection;
}

export interface RenderedSet {
  family: 4 | 6;
  /** Holds real prefixes (flags interval); otherwise only host addresses (a hash set). */
  interval: boolean;
  /** The program's name for it. */
  comment: string;
  elements: ReadonlySet<string>;
}

/** What the kernel holds, or should hold, of our table: what the diff compares. */
export interface RulesetState {
  sets: Map<string, ReadonlySet<string>>;
  /**
   * Map name → interface name → chain jumped to; for the `*_denied` sets, which hold interfaces and no
   * verdicts, interface name → ''.
   */
  vmaps: Map<string, Map<string, string>>;
  /** Chain name → digest of its rules; undefined when its rules are not as we wrote them. */
  chains: Map<string, string | undefined>;
  /** Named counter objects: none are wanted (left by an earlier ruleset, they are deleted). */
  counters: Set<string>;
}

/** Everything `program` needs, rendered. */
export interface DesiredRuleset {
  sets: Map<string, RenderedSet>;
  chains: Map<string, RenderedChain>;
  vmaps: Map<string, Map<string, string>>;
  /** The same, by program pod and program set: what a later rendering may reuse. */
  byPod: Map<string, Map<string, RenderedChain>>;
  bySet: Map<string, [string, RenderedSet][]>;
}

const hash = (text: string): string => createHash('sha256').update(text).digest('hex').slice(0, 12);

/** A set's two nft names, by family: of host addresses, or (`interval`) of prefixes. */
export function setNames(name: string, interval = false): { v4: string; v6: string } {
  const base = `s_${hash(name)}`;
  const kind = interval ? 'n' : 'v';
  return { v4: `${base}_${kind}4`, v6: `${base}_${kind}6` };
}

/** The nft set of program set `name` and `family`, as a rendering of the program names it. */
export type SetRef = (name: string, family: 4 | 6) => string;

/** The chain of one direction's rules, named for them (every pod with those rules jumps to it). */
export function podChainName(direction: PolicyDirection, chain: RenderedChain): string {
  return `${direction === 'ingress' ? 'pi' : 'pe'}_${chain.digest}`;
}

/** A chain of `bodies`, each given its `<digest>:<i>/<n>` comment. */
export function renderChain(
  bodies: readonly string[],
  direction?: PolicyDirection,
  sets: readonly string[] = [],
): RenderedChain {
  const digest = hash(bodies.join('\n'));
  const n = bodies.length;
  return { digest, sets, rules: bodies.map((b, i) => `${b} comment "${digest}:${i}/${n}"`), direction };
}

export const FORWARD_RULES = renderChain([
  'ct state established,related accept',
  `iifname vmap @${EGRESS_MAP}`,
  `oifname vmap @${INGRESS_MAP}`,
]);

function portMatch(p: NonNullable<NftPolicyRule['ports']>[number]): string {
  const proto = p.protocol.toLowerCase();
  if (p.port === undefined) return `meta l4proto ${proto}`;
  if (p.endPort !== undefined && p.endPort !== p.port) return `${proto} dport ${p.port}-${p.endPort}`;
  return `${proto} dport ${p.port}`;
}

/** One direction's rule bodies: one per allowed (set and family × port), then the counted drop. */
export function directionBodies(
  rules: readonly NftPolicyRule[],
  direction: PolicyDirection,
  ref: SetRef,
  named: Set<string> = new Set(),
): string[] {
  const field = direction === 'ingress' ? 'saddr' : 'daddr';
  const out = new Set<string>();
  for (const rule of rules) {
    const addrs =
      rule.sets === undefined
        ? ['']
        : [...new Set(rule.sets)].flatMap((s) => {
            const v4 = ref(s, 4);
            const v6 = ref(s, 6);
            named.add(v4).add(v6);
            return [`ip ${field} @${v4}`, `ip6 ${field} @${v6}`];
          });
    const ports = rule.ports === undefined ? [''] : [...new Set(rule.ports.map(portMatch))];
    for (const a of addrs) for (const p of ports) out.add([a, p, 'return'].filter(Boolean).join(' '));
  }
  const counted =
    direction === 'ingress' ? `oifname @${INGRESS_DENIED} drop` : `iifname @${EGRESS_DENIED} drop`;
  return [...out, counted, 'drop'];
}

/** The chains of one pod (one per isolated direction), keyed by chain name. */
export function renderPod(pod: NftPodPolicy, ref: SetRef): Map<string, RenderedChain> {
  const chains = new Map<string, RenderedChain>();
  for (const direction of ['ingress', 'egress'] as const) {
    const policy = pod[direction];
    if (!policy) continue;
    const named = new Set<string>();
    const bodies = directionBodies(policy.rules, direction, ref, named);
    const chain = renderChain(bodies, direction, [...named]);
    chains.set(podChainName(direction, chain), chain);
  }
  return chains;
}

const HOST = /\/(32|128)$/;

/**
 * The two nft sets of a program set, a hash set per family when it holds only host addresses and an
 * interval set when it holds a real prefix; throws PolicyProgramError on a malformed prefix.
 */
export function renderSet(name: string, prefixes: readonly string[]): [string, RenderedSet][] {
  const { v4, v6 } = setPrefixes(name, prefixes);
  const i4 = v4.some((p) => !p.endsWith('/32'));
  const i6 = v6.some((p) => !p.endsWith('/128'));
  return [
    [setNames(name, i4).v4, { family: 4, interval: i4, comment: name, elements: new Set(v4) }],
    [setNames(name, i6).v6, { family: 6, interval: i6, comment: name, elements: new Set(v6) }],
  ];
}

/** How an element of `set` is written: a prefix in an interval set, an address in a hash set. */
export function elementText(set: RenderedSet, element: string): string {
  return set.interval ? element : element.replace(HOST, '');
}

/**
 * The whole ruleset of `program`. `reuse` hands back an earlier rendering of a pod or set that has
 * not changed (the caller knows which), so a change to one pod does not re-render a thousand.
 */
export function renderProgram(
  program: NftPolicyProgram,
  reuse: {
    pod(pod: NftPodPolicy): Map<string, RenderedChain> | undefined;
    set(name: string, prefixes: readonly string[]): [string, RenderedSet][] | undefined;
  } = { pod: () => undefined, set: () => undefined },
): DesiredRuleset {
  const sets = new Map<string, RenderedSet>();
  const bySet = new Map<string, [string, RenderedSet][]>();
  for (const [name, prefixes] of program.sets) {
    const rendered = reuse.set(name, prefixes) ?? renderSet(name, prefixes);
    bySet.set(name, rendered);
    for (const [n, s] of rendered) sets.set(n, s);
  }
  const ref: SetRef = (name, family) => {
    const rendered = bySet.get(name)?.find(([, s]) => s.family === family);
    if (!rendered) throw new PolicyProgramError(`the program lacks address set ${name}`);
    return rendered[0];
  };
  const byPod = new Map<string, Map<string, RenderedChain>>();
  const chains = new Map<string, RenderedChain>([[FORWARD_CHAIN, FORWARD_RULES]]);
  const egress = new Map<string, string>();
  const ingress = new Map<string, string>();
  const egressDenied = new Map<string, string>();
  const ingressDenied = new Map<string, string>();
  for (const pod of program.pods.values()) {
    let rendered = reuse.pod(pod);
    // An earlier rendering naming a set that is gone (one that changed kind) is rendered again.
    if (rendered && ![...rendered.values()].every((c) => c.sets.every((s) => sets.has(s))))
      rendered = undefined;
    if (!rendered) {
      checkPod(pod, program.sets);
      rendered = renderPod(pod, ref);
    }
    byPod.set(pod.key, rendered);
    for (const [name, chain] of rendered) {
      chains.set(name, chain);
      const vmap = chain.direction === 'ingress' ? ingress : egress;
      const other = vmap.get(pod.hostIf);
      if (other !== undefined)
        throw new PolicyProgramError(`pods ${pod.key} and another share host interface ${pod.hostIf}`);
      vmap.set(pod.hostIf, name);
      (chain.direction === 'ingress' ? ingressDenied : egressDenied).set(pod.hostIf, '');
    }
  }
  const vmaps = new Map([
    [EGRESS_MAP, egress],
    [INGRESS_MAP, ingress],
    [EGRESS_DENIED, egressDenied],
    [INGRESS_DENIED, ingressDenied],
  ]);
  return { sets, chains, vmaps, byPod, bySet };
}

/** The state `desired` leaves in the kernel once applied. */
export function stateOf(desired: DesiredRuleset): RulesetState {
  const chains = new Map<string, string | undefined>();
  for (const [name, c] of desired.chains) chains.set(name, c.digest);
  return {
    sets: new Map([...desired.sets].map(([n, s]) => [n, s.elements])),
    // Shared, not copied: neither a rendering nor a state is changed once made.
    vmaps: desired.vmaps,
    chains,
    counters: new Set(),
  };
}
