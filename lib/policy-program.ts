// A NetworkPolicy program as plain data: what the core's compiler makes of the cluster's policies for
// this node's pods (core/policy-dataplane.ts adds who each pod is), and what a dataplane enforces: the
// host's nftables table (lib/nftables) or a DPU agent's, the simulator's included. Here, in the toolkit,
// so that the core, the renderer and the simulator (which imports only lib/) share one definition.

export type PolicyPortProtocol = 'TCP' | 'UDP' | 'SCTP';

/** Ports a rule allows: one protocol, and a port, a range, or (no port) all of them. */
export interface PortMatch {
  protocol: PolicyPortProtocol;
  port?: number;
  /** With `port`: the last port of the range. */
  endPort?: number;
}

/** Traffic allowed by one rule: from (ingress) or to (egress) any address of `sets`, on `ports`. */
export interface PolicyRule {
  /** Names of address sets; absent: any address. An empty list matches nothing. */
  sets?: readonly string[];
  /** Absent: every protocol and port. An empty list matches nothing. */
  ports?: readonly PortMatch[];
}

/** One direction of an isolated pod: what any rule matches is allowed, everything else is denied. */
export interface DirectionPolicy {
  rules: readonly PolicyRule[];
}

/** What one pod enforces, as a dataplane needs it. */
export interface ProgramPod {
  /** The attachment's key (`<workload id>/<interface>`). */
  key: string;
  /** The host side of its interface, which its traffic crosses (a veth end; a DPU port's representor). */
  hostIf: string;
  /** Absent: not isolated for ingress (everything comes in). */
  ingress?: DirectionPolicy;
  /** Absent: not isolated for egress (everything goes out). */
  egress?: DirectionPolicy;
}

/** What a dataplane enforces: its pods' rules, and the sets they name. */
export interface PolicyProgram {
  /** Set name → its prefixes (canonical CIDR text, both families, no overlaps). */
  sets: ReadonlyMap<string, readonly string[]>;
  /** By attachment key: only pods isolated in at least one direction. */
  pods: ReadonlyMap<string, ProgramPod>;
}
