// Which addresses a pod is trusted with (DESIGN.md, "Trusting what others write"): a pod of this node
// is known by the addresses we allocated to it; any other pod by its `status.podIPs`, except those in
// this node's own pod ranges or held by a pod of ours — a stale or lying record must never put another
// pod into an address set under an address one of ours holds. The incumbent keeps what it has.

import { type Cidr, parseCidr } from '../../lib/cidr';
import type { PolicyPod } from '../policy-source';
import { addressPrefix, covers } from './ip-block';

/** One of this node's attachments, as the attach flow knows it. */
export interface LocalPod {
  /** The attachment's key (`<workload id>/<interface>`). */
  key: string;
  /** The host side of its interface. */
  hostIf: string;
  /** Ours, allocated here (canonical text). */
  ips: readonly string[];
  /** The pod as it was looked up at attach (labels, named ports). */
  pod: PolicyPod;
}

export interface CompileOptions {
  /** This node's pod ranges (CIDR text): no pod but ours is trusted with an address inside them. */
  localRanges: readonly string[];
}

/** A pod as the compiler sees it: the value in force and the addresses it may be matched by. */
export interface PodView {
  pod: PolicyPod;
  /** Canonical text; empty for hostNetwork pods and pods without (trusted) addresses. */
  addresses: readonly string[];
  /** The same as /32 and /128 prefixes, parsed once for every set the pod is in. */
  prefixes: readonly Cidr[];
}

function withPrefixes(pod: PolicyPod, addresses: readonly string[]): PodView {
  const prefixes = addresses.flatMap((ip) => addressPrefix(ip) ?? []);
  return { pod, addresses, prefixes };
}

export class LocalRanges {
  private readonly ranges: Cidr[];

  constructor(texts: readonly string[]) {
    this.ranges = texts.map((t) => parseCidr(t));
  }

  contains(ip: string): boolean {
    const p = addressPrefix(ip);
    return p !== undefined && this.ranges.some((r) => covers(r, p));
  }
}

/**
 * The view of one pod (`namespace/name`) from the source's record and this node's attachments of it.
 * With attachments, the source's record is used only when it is the same pod (same uid, or the runtime
 * gave none); a record of another uid is an older or newer pod of that name, not the one attached here.
 */
export function viewPod(
  source: PolicyPod | undefined,
  locals: readonly LocalPod[],
  ranges: LocalRanges,
  localAddresses: { has(ip: string): boolean },
): PodView | undefined {
  const first = locals[0];
  if (first) {
    const sameUid = source && (first.pod.uid === '' || source.uid === first.pod.uid);
    const addresses = [...new Set(locals.flatMap((l) => l.ips))].sort();
    return withPrefixes(sameUid ? source : first.pod, addresses);
  }
  if (!source) return undefined;
  if (source.hostNetwork) return withPrefixes(source, []);
  const addresses = source.ips.filter(
    (ip) => !localAddresses.has(ip) && !ranges.contains(ip) && addressPrefix(ip) !== undefined,
  );
  return withPrefixes(source, addresses);
}
