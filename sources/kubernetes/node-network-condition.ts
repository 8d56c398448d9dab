import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1NodeCondition } from '@kubernetes/client-node';
import type { Logger } from '../../core/logger';
import type { ReadinessListener } from '../../core/readiness-listener';
import { describeApiError, loadKubeConfig } from './kubernetes-pool-source';

// The Node's NetworkUnavailable condition, cleared once this node's network is up. A cloud's node
// controller (routes-based GCE, AKS kubenet, …) creates Nodes with NetworkUnavailable=True, and the
// node.kubernetes.io/network-unavailable taint that follows keeps every pod off the Node until the
// network plugin says otherwise; Calico and Cilium set it to False once their agent runs, and so does
// this, once the daemon is ready. It never sets it back to True: a daemon that stops being ready says
// so in its own readiness probe, and tainting the Node would keep new pods off while old ones run.
//
// Written through the status subresource with a strategic merge patch, which merges conditions by
// type: the kubelet's own conditions (Ready, MemoryPressure, …) stay as they are. The RBAC the fabric
// annotation needs (nodes/status patch) covers it.

/** What the condition says when it is ours. */
export const CONDITION_REASON = 'WorkloadnetIsUp';

export interface NodeNetworkConditionOptions {
  nodeName: string;
  /** kubeconfig file; empty = $KUBECONFIG, else the in-cluster service account. */
  kubeconfig: string;
  logger: Logger;
  /** First and largest delay between two failed writes. */
  backoffMs?: { initial: number; max: number };
  now?: () => number;
}

export class NodeNetworkCondition implements ReadinessListener {
  private api?: CoreV1Api;
  /** Written in this run: nothing more to do. */
  private done = false;
  private writing = false;
  private notBefore = 0;
  private backoff: number;

  constructor(private readonly opts: NodeNetworkConditionOptions) {
    this.backoff = opts.backoffMs?.initial ?? 1000;
  }

  /** Whether the condition was written in this run. */
  get cleared(): boolean {
    return this.done;
  }

  readinessChecked(ready: boolean): void {
    const now = (this.opts.now ?? Date.now)();
    if (!ready || this.done || this.writing || now < this.notBefore) return;
    this.writing = true;
    void this.write()
      .then(
        () => {
          this.done = true;
          this.opts.logger.info(
            { node: this.opts.nodeName },
            'Node condition NetworkUnavailable set to False: this node network is up',
          );
        },
        (err: unknown) => {
          this.notBefore = now + this.backoff;
          this.opts.logger.warn(
            { node: this.opts.nodeName, err: describeApiError(err), retryMs: this.backoff },
            'cannot clear the Node condition NetworkUnavailable',
          );
          this.backoff = Math.min(this.backoff * 2, this.opts.backoffMs?.max ?? 60_000);
        },
      )
      .finally(() => (this.writing = false));
  }

  private async write(): Promise<void> {
    this.api ??= loadKubeConfig(this.opts.kubeconfig).makeApiClient(CoreV1Api);
    const at = new Date();
    const condition: V1NodeCondition = {
      type: 'NetworkUnavailable',
      status: 'False',
      reason: CONDITION_REASON,
      message: 'workloadnet is running on this node',
      lastTransitionTime: at,
      lastHeartbeatTime: at,
    };
    await this.api.patchNodeStatus(
      { name: this.opts.nodeName, body: { status: { conditions: [condition] } } },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
  }
}
