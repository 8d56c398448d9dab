// The seam between the NetworkPolicy compiler (core/policy) and a dataplane that enforces it: the
// Linux backend's nftables table on the host, or a DPU agent's (backends/dpu). The compiled program is
// what this node must enforce, for its own pods only: each pod's rules per direction, and the address
// sets those rules name. A set is named for what selects it, not for what it holds, so a pod's label
// change or a new pod on another node edits set elements and leaves every rule as it is.

import type { PolicyProgram, PolicyRule, ProgramPod } from '../lib/policy-program';

export type { DirectionPolicy, PortMatch } from '../lib/policy-program';

/** Traffic allowed by one rule (lib/policy-program.ts). */
export type CompiledRule = PolicyRule;

/** What one of this node's pods must enforce. */
export interface PodPolicy extends ProgramPod {
  /** The pod, as `namespace/name`. */
  pod: string;
  /** Its own addresses (canonical text). */
  ips: readonly string[];
  /** The policies that select it (`namespace/name`), sorted. */
  policies: readonly string[];
}

/** What the node enforces: its pods' rules, and the sets they name. */
export interface CompiledPolicy extends PolicyProgram {
  /** By attachment key: only pods isolated in at least one direction. */
  pods: ReadonlyMap<string, PodPolicy>;
}

/** What changed since the program last given (a hint: the dataplane may compare everything). */
export interface PolicyTouched {
  sets: ReadonlySet<string>;
  pods: ReadonlySet<string>;
}

/** Denied packets of one pod, per direction. */
export interface PolicyDenials {
  ingress: number;
  egress: number;
}

export interface PolicyDataplane {
  /** Where it enforces, for Status and `workloadnet policy`. */
  readonly where: 'host' | 'dpu';
  /**
   * Makes the dataplane enforce exactly `program`, changing only what differs from what it holds, in
   * one transaction: no packet ever sees a half-applied program. The first call after a start reads
   * what is there and adopts it, so a restart has no moment of allow-all or deny-all. Resolves once
   * it is in force; throws, in words, when it cannot be applied (nothing changed then).
   */
  apply(program: CompiledPolicy, touched?: PolicyTouched): Promise<void>;
  /** The next apply reads the dataplane again and puts back whatever was changed behind its back. */
  invalidate(): void;
  /** Denied packets per pod (attachment key) since its rules were first applied. */
  denied(): Promise<ReadonlyMap<string, PolicyDenials>>;
  /** Removes all it programmed (policy turned off). */
  remove(): Promise<void>;
  /**
   * Pods of the last program it could not enforce (a DPU agent that speaks no policy), by attachment
   * key, with why in words. It leaves them out and enforces the others: whether such a pod may attach
   * is the controller's call (dpu.allowUnenforcedPolicy), and one that runs already never holds up the
   * rules of the rest.
   */
  unenforced?(): ReadonlyMap<string, string>;
  /**
   * Why it could not enforce the pod of this attachment, isolated or not (its port is on a DPU agent
   * that speaks no policy), once it knows where the attachment is; undefined when it can.
   */
  refusal?(key: string): Promise<string | undefined>;
  /**
   * Asks to be told when what it enforces was changed behind its back (the host's nftables table
   * edited by another tool): `repair` then has it read and put back, without waiting for the recheck.
   */
  onDrift?(repair: () => void): void;
  /** Why it cannot hear drift now (its monitor is down, being restarted), in words; else undefined. */
  monitorDown?(): string | undefined;
}
