import type {
  CompiledPolicy,
  PodPolicy,
  PolicyDataplane,
  PolicyDenials,
} from '../../../core/policy-dataplane';
import { WorkloadNetError, failedPrecondition, unavailable } from '../../../core/errors';
import type { Logger } from '../../../core/logger';
import { AckCode, ObjectKind, type Ack, type PolicyObject } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AgentLink } from '../agent-link';
import type { AgentSession } from '../agent-session';
import type { DesiredState } from '../desired-state';
import { AgentPolicy } from './agent-policy';
import { policyRefusal } from './policy-carriage';
import { agentObjects, type PolicyBody } from './policy-wire';

// NetworkPolicy on the DPU backend: a port's traffic crosses the DPU's switch, never the host's
// netfilter, so each agent enforces its own ports' rules (protocol version 4). The program is split by
// agent (a port's policy goes to the agent holding the port, with the sets it names), only what
// differs is sent, and an apply resolves once every agent that got a change acked it. Every snapshot
// an agent is sent lists its policy objects (policySnapshot), so an agent that reconnects or reboots
// holds them again before its ports carry traffic. A pod whose port is on an agent that cannot enforce
// is left out and named, with why (unenforced()): the controller refuses its attach unless the operator
// allows unenforced ports, and a pod already running there never holds up the others' rules.

export interface DpuPolicyDeps {
  link: AgentLink;
  desired: DesiredState;
  /** How long an apply waits for a port's placement and for each agent's acks. */
  ackTimeoutMs: number;
  /** Whether the session was sent its snapshot: before that, single changes wait for it. */
  snapshotSent(s: AgentSession): boolean;
  log: Logger;
}

/** How often an apply looks again for a port being placed by its attach (which runs beside it). */
const PLACEMENT_POLL_MS = 5;

export class DpuPolicy implements PolicyDataplane {
  readonly where = 'dpu';
  private readonly agents = new Map<string, AgentPolicy>();
  /** Why each agent seen since start cannot enforce ('': it can), from its last session. */
  private readonly refusals = new Map<string, string>();
  private unenforcedKeys = new Map<string, string>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly deps: DpuPolicyDeps) {}

  /** Attachments under policy whose agent cannot enforce, left out of the last apply, and why. */
  unenforced(): ReadonlyMap<string, string> {
    return this.unenforcedKeys;
  }

  apply(program: CompiledPolicy): Promise<void> {
    return this.serial(() => this.applyNow(program));
  }

  /** The agents check their own tables; what one refused goes again at the next change. */
  invalidate(): void {}

  /** Nothing: agents do not report denied packets yet (the protocol carries no counters). */
  async denied(): Promise<ReadonlyMap<string, PolicyDenials>> {
    return new Map();
  }

  remove(): Promise<void> {
    return this.serial(() => this.sendAll(new Map([...this.agents.keys()].map((a) => [a, new Map()]))));
  }

  // ---- what the backend's agent link reports -------------------------------------------------

  lost(s: AgentSession, reason: string): void {
    this.agents
      .get(s.agentId)
      ?.failAll((name) =>
        unavailable(`the stream to DPU agent ${s.agentId} ended while it applied ${name} (${reason})`),
      );
  }

  ack(s: AgentSession, ack: Ack): void {
    const ok = ack.code === AckCode.ACK_CODE_OK;
    const taken = this.agents
      .get(s.agentId)
      ?.ack(ack.name, { generation: ack.generation, ok, message: ack.message });
    if (!ok)
      this.deps.log.warn(
        { agentId: s.agentId, object: ack.name, generation: ack.generation, message: ack.message },
        'agent could not enforce a policy object',
      );
    else if (!taken)
      this.deps.log.debug({ agentId: s.agentId, object: ack.name }, 'stale policy ack ignored');
  }

  /** What a snapshot to `s` lists: its policy objects, and whether it keeps those it does not list. */
  policySnapshot(s: AgentSession): { objects: PolicyObject[]; keepUnlisted: boolean } {
    if (policyRefusal(s.version, s.hello)) return { objects: [], keepUnlisted: true };
    const held = this.agents.get(s.agentId);
    // Before the first apply since start the daemon does not know the policy yet: the agent keeps it.
    return { objects: held?.snapshot() ?? [], keepUnlisted: !held?.planned };
  }

  // ---- an apply ------------------------------------------------------------------------------

  private async applyNow(program: CompiledPolicy): Promise<void> {
    const byAgent = new Map<string, PodPolicy[]>();
    for (const a of this.agents.keys()) byAgent.set(a, []);
    const deadline = performance.now() + this.deps.ackTimeoutMs;
    for (const pod of program.pods.values()) {
      const agentId = await this.placement(pod.key, pod.pod, deadline);
      let list = byAgent.get(agentId);
      if (!list) byAgent.set(agentId, (list = []));
      list.push(pod);
    }
    const unenforced = new Map<string, string>();
    for (const [agentId, pods] of byAgent) {
      const s = this.deps.link.sessionOf(agentId);
      // An agent away is judged by its last session.
      if (s) this.refusals.set(agentId, policyRefusal(s.version, s.hello) ?? '');
      const why = this.refusals.get(agentId);
      if (!why || pods.length === 0) continue;
      for (const p of pods)
        unenforced.set(
          p.key,
          `DPU agent ${agentId} ${why}, so it cannot enforce the NetworkPolicy of ${p.pod}`,
        );
      byAgent.set(agentId, []);
    }
    const plans = new Map<string, Map<string, PolicyBody>>();
    for (const [agentId, pods] of byAgent) plans.set(agentId, agentObjects(program, pods));
    await this.sendAll(plans);
    this.unenforcedKeys = unenforced;
  }

  /** Why the agent holding this attachment's port cannot enforce, once it is placed; undefined: it can. */
  async refusal(key: string): Promise<string | undefined> {
    const agentId = await this.placement(key, key, performance.now() + this.deps.ackTimeoutMs);
    const s = this.deps.link.sessionOf(agentId);
    const why = s ? policyRefusal(s.version, s.hello) : this.refusals.get(agentId);
    return why ? `DPU agent ${agentId} ${why}, so it cannot enforce NetworkPolicy` : undefined;
  }

  /** The agent holding a port; waits (to `deadline`) for an attach running beside the apply. */
  private async placement(key: string, pod: string, deadline: number): Promise<string> {
    for (;;) {
      const agentId = this.deps.desired.get(key)?.agentId;
      if (agentId) return agentId;
      if (performance.now() >= deadline)
        throw unavailable(
          `NetworkPolicy of ${pod}: its port ${key} is not placed on any DPU agent within ${this.deps.ackTimeoutMs} ms`,
        );
      await new Promise((r) => setTimeout(r, PLACEMENT_POLL_MS));
    }
  }

  /** Sends each agent what differs from its plan, and waits for every ack. */
  private async sendAll(plans: ReadonlyMap<string, ReadonlyMap<string, PolicyBody>>): Promise<void> {
    const waits: Array<Promise<void>> = [];
    for (const [agentId, plan] of plans) {
      let held = this.agents.get(agentId);
      if (!held) this.agents.set(agentId, (held = new AgentPolicy(agentId)));
      const changes = held.set(plan, () => this.deps.desired.nextGeneration());
      if (changes.upserts.length + changes.deletes.length === 0) continue;
      // Only a session that already got its snapshot hears single changes: the next snapshot lists them.
      const s = this.deps.link.sessionOf(agentId);
      const live = s && this.deps.snapshotSent(s) ? s : undefined;
      for (const object of changes.upserts) {
        live?.send({ upsert: { policy: object } });
        waits.push(this.acked(held, object.name, object.generation));
      }
      for (const { name, generation } of changes.deletes) {
        live?.send({ delete: { name, generation, reason: '', kind: ObjectKind.OBJECT_KIND_POLICY } });
        waits.push(this.acked(held, name, generation));
      }
    }
    const timer = setTimeout(() => {
      for (const held of this.agents.values())
        held.failAll(
          (name) =>
            unavailable(
              `DPU agent ${held.agentId} did not confirm ${name} within ${this.deps.ackTimeoutMs} ms; NetworkPolicy is not in force there yet`,
            ),
          true,
        );
    }, this.deps.ackTimeoutMs);
    try {
      await Promise.all(waits);
    } finally {
      clearTimeout(timer);
    }
  }

  private acked(held: AgentPolicy, name: string, generation: number): Promise<void> {
    return held.wait(name, generation).catch((err: Error) => {
      throw err instanceof WorkloadNetError
        ? err
        : failedPrecondition(`DPU agent ${held.agentId} refused ${name}: ${err.message}`);
    });
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work);
    this.queue = next.catch(() => undefined);
    return next;
  }
}
