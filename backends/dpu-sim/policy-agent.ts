import type { Logger } from 'pino';
import {
  AckCode,
  ObjectKind,
  type Ack,
  type PolicyObject,
  type PortPolicy,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { NftPodPolicy, NftPolicyProgram } from '../../lib/nftables/policy-program';
import { PolicyProgramError } from '../../lib/nftables/policy-program';
import { PORT_PREFIX, SET_PREFIX, directionOf, readPolicyObject } from './policy-objects';
import type { PortTable } from './port-table';

// The agent's NetworkPolicy half (protocol version 4, feature "network-policy"): it holds the address
// sets and port policies the daemon sends, and keeps the dataplane's table equal to them for the ports
// it holds (a port policy whose port is not programmed yet waits for it: its rules go in before the
// port is acked). Each change is acked only once it is in force; an object that cannot be enforced is
// refused in words and changes nothing.

/** The version that carries policy objects. */
export const POLICY_PROTOCOL_VERSION = 4;
/** The feature of an agent that enforces them. */
export const POLICY_FEATURE = 'network-policy';

/** What enforces the program: the netns dataplane's nftables table in the DPU's namespace. */
export interface PolicyEnforcer {
  /** Makes the table enforce exactly `program`; throws in words (the table is then as it was). */
  apply(program: NftPolicyProgram): Promise<void>;
}

export class PolicyAgent {
  private readonly sets = new Map<string, { generation: number; prefixes: string[] }>();
  private readonly ports = new Map<string, { generation: number; policy: PortPolicy }>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly enforcer: PolicyEnforcer,
    private readonly table: PortTable,
    private readonly log: Logger,
  ) {}

  get size(): number {
    return this.sets.size + this.ports.size;
  }

  upsert(o: PolicyObject): Promise<Ack> {
    return this.serial(async () => {
      const base = ackBase(o.name, o.generation);
      let held;
      try {
        held = readPolicyObject(o, this.setPrefixes());
      } catch (err) {
        return this.refused(base, err);
      }
      const before = this.copy();
      if (held.kind === 'set') this.sets.set(held.name.slice(SET_PREFIX.length), held);
      else this.ports.set(held.policy.port, held);
      return this.enforced(base, before);
    });
  }

  delete(name: string, generation: number): Promise<Ack> {
    return this.serial(async () => {
      const base = ackBase(name, generation);
      const before = this.copy();
      if (name.startsWith(SET_PREFIX)) {
        const set = name.slice(SET_PREFIX.length);
        const user = [...this.ports.values()].find((p) => namesSet(p.policy, set));
        if (user)
          return this.refused(
            base,
            new PolicyProgramError(
              `address set ${set} is still named by the port policy of ${user.policy.port}`,
            ),
          );
        this.sets.delete(set);
      } else this.ports.delete(name.slice(PORT_PREFIX.length));
      return this.enforced(base, before);
    });
  }

  /** A port was programmed or removed: the table follows (its policy goes in before its ack). */
  portsChanged(): Promise<void> {
    return this.serial(() => this.enforcer.apply(this.program()));
  }

  /** After a whole snapshot: what it did not list goes, unless the daemon does not know its policy yet. */
  completeSync(seen: ReadonlySet<string>, keepUnlisted: boolean): Promise<void> {
    return this.serial(async () => {
      const unlisted = [
        ...[...this.ports.keys()].map((p) => PORT_PREFIX + p),
        ...[...this.sets.keys()].map((s) => SET_PREFIX + s),
      ].filter((n) => !seen.has(n));
      if (unlisted.length === 0) return;
      if (keepUnlisted) {
        this.log.warn({ kept: unlisted }, 'the daemon does not know its policy yet: keeping policy objects');
        return;
      }
      for (const n of unlisted)
        if (n.startsWith(PORT_PREFIX)) this.ports.delete(n.slice(PORT_PREFIX.length));
        else this.sets.delete(n.slice(SET_PREFIX.length));
      await this.enforcer.apply(this.program());
      this.log.info({ removed: unlisted.length }, 'policy objects not in the snapshot removed');
    });
  }

  private async enforced(base: Ack, before: ReturnType<PolicyAgent['copy']>): Promise<Ack> {
    try {
      await this.enforcer.apply(this.program());
    } catch (err) {
      this.restore(before);
      return this.refused(base, err);
    }
    this.log.debug({ object: base.name, generation: base.generation }, 'policy object in force');
    return { ...base, code: AckCode.ACK_CODE_OK };
  }

  private refused(base: Ack, err: unknown): Ack {
    const invalid = err instanceof PolicyProgramError;
    const message = (err as Error).message;
    this.log.warn({ object: base.name, err: message }, 'policy object refused');
    return {
      ...base,
      code: invalid ? AckCode.ACK_CODE_INVALID : AckCode.ACK_CODE_INTERNAL,
      retryable: !invalid,
      message,
    };
  }

  /** The held policy, for the ports this DPU holds (their representors are where traffic crosses). */
  private program(): NftPolicyProgram {
    const pods = new Map<string, NftPodPolicy>();
    for (const [port, { policy }] of this.ports) {
      const representor = this.table.get(port)?.representor;
      if (!representor) continue;
      pods.set(port, {
        key: port,
        hostIf: representor,
        ingress: directionOf(`port policy of ${port}: ingress`, policy.ingress),
        egress: directionOf(`port policy of ${port}: egress`, policy.egress),
      });
    }
    return { sets: this.setPrefixes(), pods };
  }

  private setPrefixes(): Map<string, string[]> {
    return new Map([...this.sets].map(([name, s]) => [name, s.prefixes]));
  }

  private copy(): { sets: PolicyAgent['sets']; ports: PolicyAgent['ports'] } {
    return { sets: new Map(this.sets), ports: new Map(this.ports) };
  }

  private restore(c: ReturnType<PolicyAgent['copy']>): void {
    this.sets.clear();
    this.ports.clear();
    for (const [k, v] of c.sets) this.sets.set(k, v);
    for (const [k, v] of c.ports) this.ports.set(k, v);
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work);
    this.queue = next.catch(() => undefined);
    return next;
  }
}

function ackBase(name: string, generation: number): Ack {
  return {
    name,
    generation,
    code: AckCode.ACK_CODE_OK,
    message: '',
    retryable: false,
    kind: ObjectKind.OBJECT_KIND_POLICY,
  };
}

function namesSet(p: PortPolicy, set: string): boolean {
  return [p.ingress, p.egress].some((d) => d?.rules.some((r) => r.sets.includes(set)));
}
