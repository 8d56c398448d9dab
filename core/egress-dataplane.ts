// The seam between the core, which knows the networks, their ranges and the cluster's, and a backend
// that can masquerade its pods' traffic leaving the cluster (the Linux backend's nftables table).

/** What to masquerade: sources in `pod`, unless the destination lies in `cluster` (CIDR texts). */
export interface EgressRanges {
  pod: readonly string[];
  cluster: readonly string[];
}

export interface EgressDataplane {
  /**
   * Masquerades exactly `ranges`; with no pod range, removes what it programmed. Cheap when nothing
   * changed since the last call. Throws, in words, when it cannot (a foreign table of its name, no
   * nftables): the caller reports it and calls again later.
   */
  apply(ranges: EgressRanges): Promise<void>;
  /** Forgets what was applied: the next apply programs it again (puts back a table changed by hand). */
  invalidate(): void;
  /** Packets masqueraded so far, when known (Status). */
  readonly masqueraded: number | undefined;
}
