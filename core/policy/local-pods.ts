import type { PolicyPod, PolicyState } from '../policy-source';
import { objectKey } from '../policy-source';
import type { LocalPod } from './trusted-pods';

// This node's pods as NetworkPolicy sees them: the attachments that carry a pod's identity (a CNI ADD's
// K8S_POD_NAMESPACE and K8S_POD_NAME), with the addresses this daemon gave them and the host side of
// their interface. Their labels come from the source; their addresses never do (they are ours).

/** What the policy room reads of a recorded attachment (core/store's row, structurally). */
export interface PolicyRow {
  key: string;
  network?: string;
  pod?: { uid?: string; namespace?: string; name?: string };
  /** 'adopted': recorded from the dataplane after the state store was lost (no identity kept). */
  origin?: string;
  ips: ReadonlyArray<{ address: string }>;
  dataplane?: { hostIfName?: string };
}

/** The row's pod, when it names one: the identity a policy can select. */
export function podIdentityOf(
  row: Pick<PolicyRow, 'pod'>,
): { namespace: string; name: string; uid: string } | undefined {
  const p = row.pod;
  if (!p?.namespace || !p.name) return undefined;
  return { namespace: p.namespace, name: p.name, uid: p.uid ?? '' };
}

/**
 * A row as a local pod, with the pod as the source holds it (the same uid, or any when the row has
 * none). A pod the source does not hold (deleted while its sandbox lives on) keeps no labels: only
 * policies selecting every pod of its namespace select it, as a pod that was labelled nothing would be.
 */
export function localPodOf(
  row: PolicyRow,
  state: PolicyState,
  known?: PolicyPod,
  where: 'host' | 'dpu' = 'host',
): LocalPod | undefined {
  const id = podIdentityOf(row);
  // A DPU's port is its agent's to enforce, known by its attachment key: it may have no host end.
  const hostIf = row.dataplane?.hostIfName ?? (where === 'dpu' ? row.key : undefined);
  if (!id || !hostIf) return undefined;
  const held = state.pods.get(objectKey(id.namespace, id.name));
  const pod =
    held && (id.uid === '' || held.uid === id.uid)
      ? held
      : (known ?? {
          namespace: id.namespace,
          name: id.name,
          uid: id.uid,
          labels: {},
          ips: [],
          namedPorts: [],
          nodeName: '',
          hostNetwork: false,
        });
  return { key: row.key, hostIf, ips: row.ips.map((i) => i.address), pod };
}

/**
 * The pod of an attachment adopted after the state store was lost (its row kept its addresses, not its
 * identity), as the source states it: the one pod of this node, in the pod network, whose
 * `status.podIPs` hold an address we gave this attachment. Without it, the pod would drop out of its
 * own rules and of every set that selects it, and its denied flows would open while it runs. Only the
 * kubelet of this node reports its pods' addresses, and only from our own CNI result, so the claim
 * comes from the owner; two pods stating the address are no evidence, and the row stays unknown.
 */
export function adoptedPodOf(row: PolicyRow, state: PolicyState, nodeName: string): LocalPod | undefined {
  const hostIf = row.dataplane?.hostIfName;
  if (row.origin !== 'adopted' || podIdentityOf(row) || !hostIf || !nodeName) return undefined;
  const ips = row.ips.map((i) => i.address);
  const claims = [...state.pods.values()].filter(
    (p) => p.nodeName === nodeName && !p.hostNetwork && p.ips.some((ip) => ips.includes(ip)),
  );
  const [pod] = claims;
  if (!pod || claims.length > 1) return undefined;
  return { key: row.key, hostIf, ips, pod };
}
