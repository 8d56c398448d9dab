import { ContainerModule } from 'inversify';
import { DEFAULT_NETWORK, networkPolicyOn, nodeNameOf, type DaemonConfig } from '../../core/config';
import { effectiveNetworks } from '../../core/ipam/effective-networks';
import type { Logger } from '../../core/logger';
import { POOL_SOURCE, type PoolSource } from '../../core/ipam/pool-source';
import { PEER_SOURCE, type PeerSource } from '../../core/peer-source';
import { KubernetesPeerSource } from './kubernetes-peer-source';
import { KubernetesPoolSource } from './kubernetes-pool-source';
import { kubernetesPolicySource } from './kubernetes-policy-source';
import { POLICY_SOURCE, type PolicySource } from '../../core/policy-source';
import { NodeNetworkCondition } from './node-network-condition';
import { READINESS_LISTENER, type ReadinessListener } from '../../core/readiness-listener';

/**
 * Binds the kubernetes pool source in place of the default one, the Kubernetes peer source beside it, the
 * Node's network condition, and (NetworkPolicy on) the Namespaces, Pods and NetworkPolicies.
 */
export function kubernetesPoolSourceModule(config: DaemonConfig, logger: Logger): ContainerModule {
  const nodeName = nodeNameOf(config);
  return new ContainerModule((bind, _unbind, isBound, rebind) => {
    rebind<PoolSource>(POOL_SOURCE).toDynamicValue(
      () =>
        new KubernetesPoolSource({
          nodeName,
          kubeconfig: config.kubeconfig,
          logger: logger.child({ poolSource: 'kubernetes' }),
        }),
    );
    // The Node's NetworkUnavailable condition cleared once the daemon is ready, as Calico and Cilium do.
    bind<ReadinessListener>(READINESS_LISTENER).toDynamicValue(
      () =>
        new NodeNetworkCondition({
          nodeName,
          kubeconfig: config.kubeconfig,
          logger: logger.child({ part: 'node condition' }),
        }),
    );
    // Peers come from the same API as the ranges; the source connects only when the fabric starts it.
    (isBound(PEER_SOURCE) ? rebind<PeerSource>(PEER_SOURCE) : bind<PeerSource>(PEER_SOURCE)).toDynamicValue(
      () =>
        new KubernetesPeerSource({
          nodeName,
          kubeconfig: config.kubeconfig,
          logger: logger.child({ peerSource: 'kubernetes' }),
          clusterCidrs: config.fabric.clusterCidrs,
          // The default network's pools are this Node's podCIDRs, which the source reads itself.
          ownRanges: effectiveNetworks(config)
            .filter((n) => n.name !== DEFAULT_NETWORK)
            .flatMap((n) => n.podCidrs),
        }),
    );
    // The policies live in the same API; the source connects only when the policy controller starts it.
    if (networkPolicyOn(config))
      bind<PolicySource>(POLICY_SOURCE).toDynamicValue(() => kubernetesPolicySource(config, logger));
  });
}
