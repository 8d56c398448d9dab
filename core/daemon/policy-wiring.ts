import type { interfaces } from 'inversify';
import type { Lifecycle } from '../lifecycle';
import type { DaemonConfig } from '../config';
import { networkPolicyOn, nodeNameOf } from '../config';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import { NETWORKS, type NetworkSet } from '../ipam/network';
import { POLICY_SOURCE, type PolicySource } from '../policy-source';
import { PolicyBook } from '../policy/policy-book';
import { POLICY_CONTROLLER, PolicyController } from '../policy/policy-controller';
import { STORE, type Store } from '../store/store';

// NetworkPolicy's part of the container: the controller, when policy is on, over the policy source a
// source module bound (the Kubernetes one) and the backends of the networks the node serves.

/** Every this often each dataplane is read and what was changed behind the daemon's back put back. */
const RECHECK_INTERVAL_MS = 30_000;

export function bindPolicy(
  c: interfaces.Container,
  config: DaemonConfig,
  logger: Logger,
  metrics: Metrics,
): void {
  if (!networkPolicyOn(config)) return;
  c.bind<PolicyController>(POLICY_CONTROLLER).toDynamicValue((ctx) => {
    const networkSet = ctx.container.get<NetworkSet>(NETWORKS);
    const store = ctx.container.get<Store>(STORE);
    // This node's pod ranges: a pod the source places at one of their addresses is trusted with it
    // only when it is one of our own attachments (policy-book.ts).
    const localRanges = (): string[] =>
      networkSet.networks.flatMap((n) => [
        ...n.config.podCidrs,
        ...n.allocator.allPools().map((p) => p.cidr.text),
      ]);
    const controller = new PolicyController({
      source: ctx.container.get<PolicySource>(POLICY_SOURCE),
      targets: networkSet.backends().map((b) => ({
        backend: b.name,
        dataplane: b.policy,
        networks: networkSet.networks.filter((n) => n.backend === b).map((n) => n.name),
      })),
      newBook: (state, locals) => new PolicyBook(state, locals, { localRanges: localRanges() }),
      localRanges,
      rows: () => store.rows(),
      nodeName: nodeNameOf(config),
      admitTimeoutMs: config.policyAdmitTimeoutMs,
      recheckIntervalMs: RECHECK_INTERVAL_MS,
      allowUnenforced: config.dpu.allowUnenforcedPolicy,
      log: logger.child({ part: 'policy' }),
      applied: (backend, ms, err) => metrics.policyApplied(backend, ms, err),
    });
    metrics.policyFigures = () => controller.figures();
    return controller;
  });
}

/**
 * The daemon's NetworkPolicy part, after the store and its reconcile (the recorded pods) and before
 * serving. With policy on, the controller; it does not wait for the source's first list (the rules the
 * kernel holds from the last run stay in force meanwhile, and pods wait to be admitted). Turned off
 * on purpose ("off"), each backend's rules are removed, so that nothing is filtered any more; with
 * "auto" and another source they are left as they are (`workloadnet cleanup` removes them).
 */
export function policyPart(c: interfaces.Container, config: DaemonConfig, log: Logger): Lifecycle {
  if (networkPolicyOn(config)) {
    const controller = (): PolicyController => c.get<PolicyController>(POLICY_CONTROLLER);
    return { name: 'network policy', start: () => controller().start(), stop: () => controller().stop() };
  }
  return {
    name: 'network policy (off)',
    start: async () => {
      if (config.networkPolicy !== 'off') return;
      for (const b of c.get<NetworkSet>(NETWORKS).backends())
        await b.policy?.remove().catch((err: unknown) => {
          log.warn(
            { backend: b.name, err: (err as Error).message },
            'NetworkPolicy is off but its rules could not be removed',
          );
        });
    },
    stop: async () => undefined,
  };
}
