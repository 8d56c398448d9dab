// Our policy table in one network namespace, kept equal to the program last applied: the host's
// (backends/linux/policy) and, later, a simulated DPU's. It remembers what it wrote, so an apply costs
// one transaction of what changed and no read; the first apply after construction, and the first after
// invalidate(), reads the kernel instead and writes only what differs from it. So a restarted daemon
// adopting the same program changes nothing (no moment of allow-all or deny-all), and drift made by
// hand is put back.
//
// A table of our name without our comment is someone else's (DESIGN.md, "Trusting what others write"):
// refused in words, never changed or deleted.

import { type NftContext, NftablesError } from './libnftables';
import type { NfElementWriter } from './nf-elements';
import type { OwnTransactions } from './own-transactions';
import { diffPolicy, diffText, onlyElements, type PolicyDiff } from './policy-diff';
import { parseDenied, parseTableListing } from './policy-listing';
import {
  incrementalDiff,
  sameList,
  usersAndOwners,
  type LastRendering,
  type RenderedPod,
  type RenderedProgramSet,
} from './policy-increment';
import type { NftPodPolicy, NftPolicyProgram } from './policy-program';
import {
  EGRESS_DENIED,
  INGRESS_DENIED,
  POLICY_MARK,
  POLICY_TABLE,
  TABLE_REF,
  renderProgram,
  stateOf,
  type DesiredRuleset,
  type RulesetState,
} from './policy-ruleset';

/** A table of our name that is not ours: left as it is, and the policy not enforced. */
export class ForeignPolicyTableError extends NftablesError {}

/** What changed since the program last applied (a hint; see apply). */
export interface NftPolicyTouched {
  sets: ReadonlySet<string>;
  pods: ReadonlySet<string>;
}

export interface PodDenials {
  ingress: number;
  egress: number;
}

const ABSENT = 'absent';
/** At most ~40 bytes each: a batch of this many stays far inside a netlink socket's send buffer. */
const NETLINK_ELEMENTS_MAX = 2048;
const NO_TABLE = /No such file or directory/;

export class NftPolicyTable {
  /** What the kernel holds of our table; undefined: unknown, read it before the next write. */
  private held: RulesetState | typeof ABSENT | undefined;
  /** The handle of the table last seen carrying our comment. */
  private ownHandle?: number;
  /** Renderings of the program last applied, reused while a pod or set is unchanged. */
  private last: LastRendering = { pods: new Map(), sets: new Map(), users: new Map(), owners: new Map() };
  private lastFailed = false;
  private queue: Promise<unknown> = Promise.resolve();
  /** Bumped by invalidate(): an apply under way when it is called does not trust what it wrote. */
  private epoch = 0;
  private kernelReads = 0;

  /**
   * `elements`, when given, writes a change that is nothing but elements of hash sets (a label change,
   * a peer's new address) straight over nf_tables netlink, without libnftables's cache rebuild; it
   * must act in the same namespace as `nft`. `own`, when given, is told of every transaction this
   * table writes, so that a monitor of the kernel's notifications can tell ours from others'.
   */
  constructor(
    private readonly nft: NftContext,
    private readonly elements?: NfElementWriter,
    private readonly own?: OwnTransactions,
  ) {}

  /** How many times the table was read whole from the kernel (each costs ~0.8 s at 1,000 pods). */
  get reads(): number {
    return this.kernelReads;
  }

  /**
   * Makes the table enforce exactly `program`, in one transaction of what differs. `touched` names the
   * pods that changed since the last program; a pod it leaves out, given the same hostIf, keeps its
   * earlier rendering (sets are compared element by element whatever it says). Throws, in words, when
   * the program is malformed or the kernel refuses it: the kernel is then as it was.
   */
  apply(program: NftPolicyProgram, touched?: NftPolicyTouched): Promise<void> {
    return this.serial(async () => {
      const trustTouched = touched !== undefined && !this.lastFailed;
      const keep = (pod: NftPodPolicy, prev: RenderedPod): boolean =>
        prev.pod === pod || (trustTouched && !touched.pods.has(pod.key) && prev.pod.hostIf === pod.hostIf);
      this.lastFailed = true;
      const epoch = this.epoch;
      // A table just read back is compared whole: it may differ from what we wrote anywhere (drift).
      const readNow = this.held === undefined;
      if (readNow) await this.readKernel();
      const held = this.held === ABSENT ? undefined : this.held;
      const step =
        held && !readNow && trustTouched ? incrementalDiff(program, this.last, held, keep) : undefined;
      const { diff, commit } = step ?? this.wholeDiff(program, held, keep);
      if (diffText(diff) !== '') {
        try {
          await this.write(diff);
        } catch (err) {
          // What the kernel holds may not be what we thought (the cause of the failure, perhaps).
          this.held = undefined;
          throw new NftablesError(
            `nftables refused the policy of ${program.pods.size} pods (nothing was changed): ${(err as Error).message}`,
          );
        }
      }
      commit();
      // Drift heard while this apply ran may have come after its read: the next apply reads again.
      if (epoch !== this.epoch) this.held = undefined;
      this.lastFailed = false;
    });
  }

  /** The transaction from `held` to `program` worked out whole: every pod and set rendered and compared. */
  private wholeDiff(
    program: NftPolicyProgram,
    held: RulesetState | undefined,
    keep: (pod: NftPodPolicy, prev: RenderedPod) => boolean,
  ): { diff: PolicyDiff; commit: () => void } {
    const desired = renderProgram(program, {
      pod: (pod) => {
        const prev = this.last.pods.get(pod.key);
        return prev && keep(pod, prev) ? prev.chains : undefined;
      },
      set: (name, prefixes) => {
        const prev = this.last.sets.get(name);
        return prev && sameList(prev.prefixes, prefixes) ? prev.sets : undefined;
      },
    });
    return {
      diff: diffPolicy(held, desired),
      commit: () => {
        this.held = stateOf(desired);
        this.remember(program, desired);
      },
    };
  }

  /**
   * One transaction: over netlink when it is only elements (of hash sets, maps and denied sets: a label
   * change, a new pod whose rules a chain already holds), through libnftables otherwise.
   */
  private async write(diff: PolicyDiff): Promise<void> {
    await this.owned(() => this.writeNow(diff));
  }

  /** Runs one write that changes the table, expected as our own transaction while it runs. */
  private async owned<T>(write: () => Promise<T>): Promise<T> {
    const expected = this.own?.expect();
    try {
      const out = await write();
      expected?.done();
      return out;
    } catch (err) {
      expected?.failed();
      throw err;
    }
  }

  private async writeNow(diff: PolicyDiff): Promise<void> {
    let count = 0;
    for (const e of [...diff.elements, ...diff.maps]) count += e.added.length + e.gone.length;
    // A batch is one datagram, bounded by the socket's send buffer: a large change goes through nft.
    if (!this.elements || !onlyElements(diff) || count > NETLINK_ELEMENTS_MAX) {
      await this.nft.run(diffText(diff));
      return;
    }
    const address = (prefix: string): string => prefix.slice(0, prefix.lastIndexOf('/'));
    await this.elements.write(POLICY_TABLE, [
      ...diff.elements.map((e) => ({ set: e.name, add: e.added.map(address), delete: e.gone.map(address) })),
      ...diff.maps.map((m) => ({
        set: m.name,
        keys: 'ifname' as const,
        add: m.added,
        delete: m.gone,
        jumps: m.jumps,
      })),
    ]);
  }

  /** The next apply reads the kernel again and puts back what differs from the program. */
  invalidate(): void {
    this.held = undefined;
    this.epoch++;
  }

  /** Packets dropped per pod and direction, from the counters of the `*_denied` sets' elements. */
  denied(): Promise<Map<string, PodDenials>> {
    return this.serial(async () => {
      const out = new Map<string, PodDenials>();
      if (this.held === ABSENT || this.last.pods.size === 0) return out;
      const read = async (set: string): Promise<Map<string, number>> => {
        try {
          return parseDenied(await this.nft.run(`list set ${TABLE_REF} ${set}`, { json: true }));
        } catch (err) {
          if (NO_TABLE.test((err as Error).message)) return new Map();
          throw err;
        }
      };
      const ingress = await read(INGRESS_DENIED);
      const egress = await read(EGRESS_DENIED);
      for (const { pod, chains } of this.last.pods.values()) {
        const d = { ingress: 0, egress: 0 };
        for (const chain of chains.values())
          if (chain.direction)
            d[chain.direction] = (chain.direction === 'ingress' ? ingress : egress).get(pod.hostIf) ?? 0;
        out.set(pod.key, d);
      }
      return out;
    });
  }

  /** Deletes our table; a foreign one of our name is left as it is. */
  remove(): Promise<void> {
    return this.serial(async () => {
      this.last = { pods: new Map(), sets: new Map(), users: new Map(), owners: new Map() };
      this.held = undefined;
      const owner = await this.owner();
      if (owner.kind === 'ours') await this.owned(() => this.nft.run(`delete table ${TABLE_REF}`));
      if (owner.kind !== 'foreign') this.held = ABSENT;
    });
  }

  private async readKernel(): Promise<void> {
    this.kernelReads++;
    let listing: string;
    try {
      listing = await this.nft.run(`list table ${TABLE_REF}`, { json: true });
    } catch (err) {
      if (!NO_TABLE.test((err as Error).message)) throw err;
      this.held = ABSENT;
      return;
    }
    const table = parseTableListing(listing);
    if (table.handle !== this.ownHandle) {
      const owner = await this.owner();
      if (owner.kind === 'foreign') throw this.foreign();
      this.ownHandle = owner.handle ?? table.handle;
    }
    this.held = table.state;
  }

  /** Whose the table of our name is, by its comment (the JSON listing leaves table comments out). */
  private async owner(): Promise<{ kind: 'absent' | 'ours' | 'foreign'; handle?: number }> {
    let text: string;
    try {
      text = await this.nft.run(`list table ${TABLE_REF}`, { terse: true, handles: true });
    } catch (err) {
      if (NO_TABLE.test((err as Error).message)) return { kind: 'absent' };
      throw err;
    }
    const handle = /# handle (\d+)/.exec(text.split('\n')[0] ?? '')?.[1];
    const ours = text.includes(`comment ${JSON.stringify(POLICY_MARK)}`);
    return { kind: ours ? 'ours' : 'foreign', handle: handle === undefined ? undefined : Number(handle) };
  }

  private foreign(): ForeignPolicyTableError {
    return new ForeignPolicyTableError(
      `nftables table ${TABLE_REF} exists but is not workloadnet's (it lacks the comment ` +
        `${JSON.stringify(POLICY_MARK)}); NetworkPolicy is not enforced until that table is renamed ` +
        `or deleted (nft delete table ${TABLE_REF}), or network policy is turned off`,
    );
  }

  private remember(program: NftPolicyProgram, desired: DesiredRuleset): void {
    const pods = new Map<string, RenderedPod>();
    for (const pod of program.pods.values())
      pods.set(pod.key, { pod, chains: desired.byPod.get(pod.key) ?? new Map() });
    const sets = new Map<string, RenderedProgramSet>();
    for (const [name, prefixes] of program.sets)
      sets.set(name, { prefixes, sets: desired.bySet.get(name) ?? [] });
    this.last = { pods, sets, ...usersAndOwners(pods) };
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work);
    this.queue = next.catch(() => undefined);
    return next;
  }
}
