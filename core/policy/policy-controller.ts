import { failedPrecondition, unavailable } from '../errors';
import type { Logger } from '../logger';
import type { CompiledPolicy, PolicyDataplane, PolicyDenials, PolicyTouched } from '../policy-dataplane';
import type { PolicyChange, PolicyPod, PolicySource, PolicyState } from '../policy-source';
import { EnforcementLoop } from './enforcement-loop';
import { adoptedPodOf, localPodOf, podIdentityOf, type PolicyRow } from './local-pods';
import type { LocalPod } from './trusted-pods';
import { podPolicyView, policyFigures, policyStatus, type EnforcerView } from './policy-view';
import type { PolicyFigures } from '../metrics';
import type { PodPolicyView, PolicyStatus } from '../workload-service';

// NetworkPolicy on this node: the source's namespaces, pods and policies, compiled for this node's pods
// and kept in force by each backend's dataplane. It is the attach flow's gate (core/attach/attach-gate.ts):
// a pod's Attach answers only once its own rules and its place in every set that selects it are in
// force, and is refused, retryably and with nothing changed, when its labels cannot be known in time.
//
// Until the source has listed everything once, nothing is applied: what the kernel holds from the last
// run (the dataplane adopts it) stays in force, so a restart never opens a window of allow-all or
// deny-all, and an attach waits (up to the admit timeout) rather than go in under rules not yet known.

/** The compiler's incremental book (core/policy/policy-book.ts), as the controller drives it. */
export interface PolicyBookPort {
  sourceChanged(change: PolicyChange, state: PolicyState): PolicyTouched;
  addLocal(pod: LocalPod): PolicyTouched;
  removeLocal(key: string): PolicyTouched;
  rangesChanged(ranges: readonly string[]): PolicyTouched;
  program(): CompiledPolicy;
}

/** A backend whose networks' pods NetworkPolicy covers. */
export interface PolicyTarget {
  backend: string;
  /** Absent: the backend cannot enforce (a DPU whose agent speaks no policy). */
  dataplane?: PolicyDataplane;
  /** The networks it serves. */
  networks: readonly string[];
}

export interface PolicyControllerOptions {
  source: PolicySource;
  targets: readonly PolicyTarget[];
  /** The compiler's book, from the source's first full list and the recorded pods. */
  newBook: (state: PolicyState, locals: readonly LocalPod[]) => PolicyBookPort;
  /** The recorded attachments (the store's rows). */
  rows: () => Iterable<PolicyRow>;
  /** This node's name, as the source's pods name their node. */
  nodeName: string;
  /** This node's pod ranges now (they grow when the node is given another). */
  localRanges: () => readonly string[];
  /** How long an attach may wait for the source (its first list, a pod's labels). */
  admitTimeoutMs: number;
  /** Every this often the dataplanes are read and put back (drift). */
  recheckIntervalMs: number;
  /** Pods on a network whose backend cannot enforce are attached anyway (and reported), not refused. */
  allowUnenforced: boolean;
  log: Logger;
  /** How long each apply took (a histogram), and a failure. */
  applied?: (backend: string, ms: number, err?: Error) => void;
}

interface Target extends PolicyTarget {
  book?: PolicyBookPort;
  loop?: EnforcementLoop;
}

/** What admit() learnt, handed back to enforce(). */
interface Admitted {
  target: Target;
  pod: PolicyPod;
}

export const POLICY_CONTROLLER = Symbol.for('workloadnet.PolicyController');

export class PolicyController {
  readonly name = 'network policy';
  private readonly targets: Target[];
  private started = false;
  private synced = false;
  private syncWaiters: Array<() => void> = [];
  private timer?: NodeJS.Timeout;
  /** Attachments whose pod is on a network that cannot enforce (Status names them). */
  readonly unenforced = new Set<string>();
  /** When each local pod's rules last went in force (for `workloadnet policy`). */
  readonly appliedAt = new Map<string, Date>();

  constructor(private readonly opts: PolicyControllerOptions) {
    this.targets = opts.targets.map((t) => ({ ...t }));
    opts.source.onChange((change) => this.sourceChanged(change));
  }

  async start(): Promise<void> {
    this.started = true;
    await this.opts.source.start();
    if (this.opts.source.synced()) this.firstSync();
    this.timer = setInterval(() => this.recheck(), this.opts.recheckIntervalMs).unref();
  }

  async stop(): Promise<void> {
    this.started = false;
    clearInterval(this.timer);
    await Promise.all(this.targets.map((t) => t.loop?.stop()));
    await this.opts.source.stop();
  }

  /** See AttachGate.admit: the pod's labels, known before anything is taken. */
  async admit(call: {
    key: string;
    network: string;
    pod?: { uid?: string; namespace?: string; name?: string };
  }): Promise<Admitted | undefined> {
    const id = podIdentityOf(call);
    if (!id) return undefined;
    const target = this.targets.find((t) => t.networks.includes(call.network));
    if (!target) return undefined;
    if (!target.dataplane) {
      if (!this.opts.allowUnenforced)
        throw failedPrecondition(
          `network ${call.network} (backend ${target.backend}) cannot enforce NetworkPolicy, so pod ${id.namespace}/${id.name} is not attached; ` +
            'use a DPU agent that speaks policy (protocol 4), or set dpu.allowUnenforcedPolicy to attach such pods unenforced',
        );
      this.unenforced.add(call.key);
      return undefined;
    }
    const deadline = performance.now() + this.opts.admitTimeoutMs;
    await this.untilSynced(deadline, `${id.namespace}/${id.name}`);
    let pod: PolicyPod | undefined;
    try {
      pod = await this.opts.source.lookupPod(id, deadline);
    } catch (err) {
      throw unavailable(
        `NetworkPolicy: the labels of pod ${id.namespace}/${id.name} cannot be known (${(err as Error).message}); the pod is not attached, so that it never runs unfiltered: retry`,
      );
    }
    if (!pod)
      throw unavailable(
        `NetworkPolicy: the Kubernetes API has no pod ${id.namespace}/${id.name}${id.uid ? ` with uid ${id.uid}` : ''}; retry once it has`,
      );
    return { target, pod };
  }

  /** See AttachGate.enforce: resolves once the pod's rules and set memberships are in force. */
  async enforce(admitted: unknown, row: PolicyRow): Promise<void> {
    const { target, pod } = admitted as Admitted;
    const local = localPodOf(row, this.opts.source.state(), pod, target.dataplane?.where);
    this.rangesRechecked();
    if (!local || !target.book || !target.loop)
      throw unavailable(`NetworkPolicy: attachment ${row.key} has no host interface to enforce on`);
    await target.loop.until(target.loop.changed(target.book.addLocal(local)));
    // Isolated or not: a pod the dataplane cannot enforce now could not be isolated later either.
    const why = (await target.dataplane?.refusal?.(row.key)) ?? target.dataplane?.unenforced?.().get(row.key);
    if (why !== undefined) {
      if (!this.opts.allowUnenforced)
        throw failedPrecondition(
          `${why}, so pod ${local.pod.namespace}/${local.pod.name} is not attached; use an agent that enforces policy (protocol 4), or set ` +
            'dpu.allowUnenforcedPolicy to attach such pods unenforced',
        );
      this.unenforced.add(row.key);
    }
    this.appliedAt.set(row.key, new Date());
  }

  /** See AttachGate.release. */
  async release(key: string): Promise<void> {
    this.unenforced.delete(key);
    this.appliedAt.delete(key);
    for (const t of this.targets) {
      if (!t.book || !t.loop) continue;
      const touched = t.book.removeLocal(key);
      if (touched.pods.size === 0 && touched.sets.size === 0) continue;
      const change = t.loop.changed(touched);
      // While applies fail, waiting would hold the workload's lock through the retry's backoff (up to
      // 30 s). The pod is out of the book, so the next apply that succeeds takes it out of the kernel,
      // and a pod attached under policy meanwhile waits for that very apply before it answers.
      if (t.loop.failure) {
        this.opts.log.warn(
          { key, failure: t.loop.failure },
          'NetworkPolicy: a pod gone leaves its sets with the next apply that succeeds',
        );
        continue;
      }
      await t.loop.until(change).catch((err: unknown) => {
        this.opts.log.warn(
          { key, err: (err as Error).message },
          'NetworkPolicy: a pod gone is not yet out of its sets; retried',
        );
      });
    }
  }

  /** What this node's pods enforce, where, and since when (`workloadnet policy`); filtered by pod. */
  async explain(namespace: string, name: string): Promise<PodPolicyView[]> {
    const out: PodPolicyView[] = [];
    for (const t of this.targets) {
      if (!t.book || !t.dataplane) continue;
      const program = t.book.program();
      const denied = await t.dataplane.denied().catch(() => new Map<string, PolicyDenials>());
      for (const pod of program.pods.values()) {
        const [ns, n] = pod.pod.split('/');
        if ((namespace && ns !== namespace) || (name && n !== name)) continue;
        const at = this.appliedAt.get(pod.key) ?? t.loop?.lastAppliedAt;
        out.push(
          podPolicyView(pod, program, {
            backend: t.backend,
            where: t.dataplane.where,
            at,
            denied: denied.get(pod.key),
          }),
        );
      }
    }
    return out.sort((a, b) => a.pod.localeCompare(b.pod) || a.attachment.localeCompare(b.attachment));
  }

  /** With `counters` false, the denied counts are left at 0 and no dataplane is read. */
  status(opts: { counters: boolean } = { counters: true }): Promise<PolicyStatus> {
    const unenforced = new Set(this.unenforced);
    for (const t of this.targets) for (const k of t.dataplane?.unenforced?.().keys() ?? []) unenforced.add(k);
    return policyStatus(this.opts.source.status(), this.synced, this.enforcers(), [...unenforced], opts);
  }

  figures(): Promise<PolicyFigures> {
    return policyFigures(this.opts.source.status(), this.enforcers());
  }

  private enforcers(): EnforcerView[] {
    return this.targets.map((t) => ({
      backend: t.backend,
      dataplane: t.dataplane,
      program: t.book?.program(),
      failure: t.loop?.failure,
      lastAppliedAt: t.loop?.lastAppliedAt,
    }));
  }

  /** The first full list: every book starts from it and every recorded pod, and goes in force. */
  private firstSync(): void {
    if (this.synced) return;
    this.synced = true;
    const state = this.opts.source.state();
    const rows = [...this.opts.rows()];
    for (const t of this.targets) {
      if (!t.dataplane) {
        for (const r of rows)
          if (podIdentityOf(r) && t.networks.includes(r.network ?? 'default')) this.unenforced.add(r.key);
        continue;
      }
      const locals = rows
        .filter((r) => t.networks.includes(r.network ?? 'default'))
        .map(
          (r) =>
            localPodOf(r, state, undefined, t.dataplane?.where) ?? adoptedPodOf(r, state, this.opts.nodeName),
        )
        .filter((l): l is LocalPod => l !== undefined);
      t.book = this.opts.newBook(state, locals);
      const book = t.book;
      const loop = new EnforcementLoop({
        dataplane: t.dataplane,
        program: () => book.program(),
        applied: (ms, err) => this.appliedOnce(t, ms, err),
      });
      t.loop = loop;
      t.dataplane.onDrift?.(() => void loop.recheck());
      loop.changed();
    }
    for (const w of this.syncWaiters.splice(0)) w();
  }

  private sourceChanged(change: PolicyChange): void {
    if (!this.started) return;
    if (!this.synced) {
      if (this.opts.source.synced()) this.firstSync();
      return;
    }
    const state = this.opts.source.state();
    this.rangesRechecked();
    for (const t of this.targets) if (t.book && t.loop) t.loop.changed(t.book.sourceChanged(change, state));
  }

  private recheck(): void {
    this.rangesRechecked();
    for (const t of this.targets) t.loop?.recheck();
  }

  /**
   * The trust rule's ranges (trusted-pods.ts) as they are now: a range the node was given after the
   * first list must stop a remote pod's record from claiming an address in it, at the next change or
   * recheck at the latest.
   */
  private rangesRechecked(): void {
    const ranges = this.opts.localRanges();
    for (const t of this.targets)
      if (t.book && t.loop) {
        const touched = t.book.rangesChanged(ranges);
        if (touched.pods.size > 0 || touched.sets.size > 0) t.loop.changed(touched);
      }
  }

  private appliedOnce(t: Target, ms: number, err?: Error): void {
    this.opts.applied?.(t.backend, ms, err);
    if (err && t.loop?.failure !== err.message)
      this.opts.log.error({ backend: t.backend, err: err.message }, 'NetworkPolicy not applied; tried again');
  }

  private untilSynced(deadline: number, pod: string): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => {
          this.syncWaiters = this.syncWaiters.filter((w) => w !== done);
          const why = this.opts.source.status().reasons.join('; ');
          reject(
            unavailable(
              `NetworkPolicy: no full list of namespaces, pods and policies yet${why ? ` (${why})` : ''}; pod ${pod} is not attached, so that it never runs unfiltered: retry`,
            ),
          );
        },
        Math.max(0, deadline - performance.now()),
      );
      const done = (): void => {
        clearTimeout(timer);
        resolve();
      };
      this.syncWaiters.push(done);
    });
  }
}
