import {
  CoreV1Api,
  NetworkingV1Api,
  Observable,
  type KubeConfig,
  type ObservableMiddleware,
  type V1Namespace,
  type V1NetworkPolicy,
  type V1Pod,
} from '@kubernetes/client-node';
import type { DaemonConfig } from '../../core/config';
import { unavailable } from '../../core/errors';
import type { Logger } from '../../core/logger';
import {
  objectKey,
  type NetworkPolicy,
  type PodIdentity,
  type PolicyChange,
  type PolicyNamespace,
  type PolicyPod,
  type PolicySource,
  type PolicySourceStatus,
  type PolicyState,
} from '../../core/policy-source';
import { codeOf, describeApiError } from './api-error';
import { loadKubeConfig } from './kubernetes-pool-source';
import { ListWatchLoop, type ListWatchHolder } from './list-watch-loop';
import { ModelTable } from './model-table';
import { namespaceFromApi, podFromApi, policyFromApi } from './policy-objects';

// The NetworkPolicy model from the Kubernetes API: every Namespace, every Pod of the cluster (a peer on
// another node is matched by the addresses its pod reports) and every networking.k8s.io/v1
// NetworkPolicy, each kind its own list+watch (list-watch-loop.ts: one list from the watch cache, a
// watch from its version, resumed, relisted on 410, retried with a capped backoff). Losing the API
// keeps the last state: an empty state would lift every isolation, and a state cleared of one kind
// (no pods) would deny what the policies allow.
//
// A pod the watch does not hold yet (a CNI ADD can come before the watch's event for it) is read once,
// bounded by the caller's deadline: the attach waits for its labels, never for an API that is away.

export interface KubernetesPolicySourceOptions {
  /** kubeconfig file; empty = $KUBECONFIG, else the in-cluster service account. */
  kubeconfig: string;
  logger: Logger;
  /** First and largest delay before a failed list+watch is tried again. */
  backoffMs?: { initial: number; max: number };
}

/** What the source reads of each kind's loop. */
type LoopView = Pick<ListWatchLoop<never>, 'what' | 'listed' | 'reachable' | 'lastError' | 'start' | 'stop'>;

export class KubernetesPolicySource implements PolicySource {
  private readonly listeners: Array<(change: PolicyChange) => void> = [];
  private readonly namespaces: ModelTable<V1Namespace, PolicyNamespace>;
  private readonly pods: ModelTable<V1Pod, PolicyPod>;
  private readonly policies: ModelTable<V1NetworkPolicy, NetworkPolicy>;
  private loops: LoopView[] = [];
  private core?: CoreV1Api;

  constructor(private readonly opts: KubernetesPolicySourceOptions) {
    this.namespaces = new ModelTable({
      keyOf: (ns) => ns.metadata?.name || undefined,
      convert: (ns) => wrap(namespaceFromApi(ns)),
      changed: (name) => this.notify(name === undefined ? { kind: 'all' } : { kind: 'namespace', name }),
    });
    this.pods = new ModelTable({
      keyOf: keyOfNamespaced,
      convert: (pod) => wrap(podFromApi(pod)),
      changed: (key) => this.notify(key === undefined ? { kind: 'all' } : { kind: 'pod', key }),
    });
    this.policies = new ModelTable({
      keyOf: keyOfNamespaced,
      convert: (p) => {
        const c = policyFromApi(p);
        return c && 'policy' in c ? { value: c.policy } : c;
      },
      changed: (key) => this.notify(key === undefined ? { kind: 'all' } : { kind: 'policy', key }),
    });
  }

  /** Connects nothing until called; the lists and watches then run until stop(). */
  async start(): Promise<void> {
    if (this.loops.length > 0) return;
    const kc = loadKubeConfig(this.opts.kubeconfig);
    const core = kc.makeApiClient(CoreV1Api);
    const net = kc.makeApiClient(NetworkingV1Api);
    this.core = core;
    // Lists from the watch cache (resourceVersion 0): a relist storm never reaches etcd.
    const loop = <T extends { metadata?: { resourceVersion?: string } }>(
      what: string,
      path: string,
      list: () => Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>,
      holder: ListWatchHolder<T>,
    ): ListWatchLoop<T> => this.loopOf(kc, what, path, list, holder);
    this.loops = [
      loop(
        'Namespaces',
        '/api/v1/namespaces',
        () => core.listNamespace({ resourceVersion: '0' }),
        this.namespaces,
      ),
      loop('Pods', '/api/v1/pods', () => core.listPodForAllNamespaces({ resourceVersion: '0' }), this.pods),
      loop(
        'NetworkPolicies',
        '/apis/networking.k8s.io/v1/networkpolicies',
        () => net.listNetworkPolicyForAllNamespaces({ resourceVersion: '0' }),
        this.policies,
      ),
    ];
    for (const l of this.loops) l.start();
  }

  async stop(): Promise<void> {
    for (const l of this.loops) l.stop();
  }

  synced(): boolean {
    return this.loops.length > 0 && this.loops.every((l) => l.listed);
  }

  state(): PolicyState {
    return { namespaces: this.namespaces.values, pods: this.pods.values, policies: this.policies.values };
  }

  onChange(listener: (change: PolicyChange) => void): void {
    this.listeners.push(listener);
  }

  async lookupPod(id: PodIdentity, deadlineMs: number): Promise<PolicyPod | undefined> {
    const held = this.pods.values.get(objectKey(id.namespace, id.name));
    if (held && (id.uid === '' || held.uid === id.uid)) return held;
    const what = `pod ${id.namespace}/${id.name}${id.uid ? ` (uid ${id.uid})` : ''}`;
    const core = this.core;
    if (!core) throw unavailable(`${what}: the Kubernetes policy source is not started`);
    const left = Math.floor(deadlineMs - performance.now());
    if (left <= 0)
      throw unavailable(`${what} is not in the Kubernetes API watch yet, and no time is left to read it`);
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), left);
    try {
      const pod = await core.readNamespacedPod(
        { name: id.name, namespace: id.namespace },
        { middleware: [abortOn(abort.signal)], middlewareMergeStrategy: 'append' },
      );
      const model = podFromApi(pod);
      // Another pod of that name (the one asked for was deleted and replaced) is not it.
      return model && (id.uid === '' || model.uid === id.uid) ? model : undefined;
    } catch (err) {
      if (codeOf(err) === 404) return undefined;
      if (abort.signal.aborted)
        throw unavailable(`${what}: the Kubernetes API did not answer a read of it within ${left} ms`);
      throw unavailable(`${what} cannot be read from the Kubernetes API: ${describeApiError(err)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  status(): PolicySourceStatus {
    const reasons: string[] = [];
    const unlisted = this.loops.filter((l) => !l.listed);
    const away = this.loops.filter((l) => !l.reachable && l.lastError);
    if (this.loops.length === 0) reasons.push('the Kubernetes policy source is not started');
    else if (unlisted.length > 0)
      reasons.push(
        `no full list of ${unlisted.map((l) => l.what).join(', ')} from the Kubernetes API yet` +
          (unlisted[0]!.lastError ? ` (${unlisted[0]!.lastError})` : ''),
      );
    else if (away.length > 0)
      reasons.push(
        `Kubernetes API unreachable (${away[0]!.lastError}); keeping the last known ` +
          `${this.namespaces.values.size} namespaces, ${this.pods.values.size} pods and ` +
          `${this.policies.values.size} network policies`,
      );
    reasons.push(...this.policies.refused.values());
    return {
      synced: this.synced(),
      namespaces: this.namespaces.values.size,
      pods: this.pods.values.size,
      policies: this.policies.values.size,
      reasons,
    };
  }

  private loopOf<T extends { metadata?: { resourceVersion?: string } }>(
    kubeConfig: KubeConfig,
    what: string,
    path: string,
    list: () => Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>,
    holder: ListWatchHolder<T>,
  ): ListWatchLoop<T> {
    return new ListWatchLoop<T>({
      what,
      path,
      kubeConfig,
      list,
      holder,
      logger: this.opts.logger,
      ...(this.opts.backoffMs ? { backoffMs: this.opts.backoffMs } : {}),
    });
  }

  private notify(change: PolicyChange): void {
    for (const l of this.listeners) {
      try {
        l(change);
      } catch (err) {
        this.opts.logger.error({ err: (err as Error).message }, 'policy change listener failed');
      }
    }
  }
}

/** The policy source for the daemon's configuration (its kubeconfig), for the DI module to bind. */
export function kubernetesPolicySource(
  config: Pick<DaemonConfig, 'kubeconfig'>,
  logger: Logger,
): KubernetesPolicySource {
  return new KubernetesPolicySource({
    kubeconfig: config.kubeconfig,
    logger: logger.child({ policySource: 'kubernetes' }),
  });
}

function keyOfNamespaced(obj: { metadata?: { name?: string; namespace?: string } }): string | undefined {
  const { name, namespace } = obj.metadata ?? {};
  return name && namespace ? objectKey(namespace, name) : undefined;
}

function wrap<V>(value: V | undefined): { value: V } | undefined {
  return value === undefined ? undefined : { value };
}

/** A request middleware that lets `signal` abort the request (the client has no per-call timeout). */
function abortOn(signal: AbortSignal): ObservableMiddleware {
  return {
    pre: (ctx) => {
      ctx.setSignal(signal);
      return new Observable(Promise.resolve(ctx));
    },
    post: (res) => new Observable(Promise.resolve(res)),
  };
}
