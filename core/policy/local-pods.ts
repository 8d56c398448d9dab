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
export function localPodOf(row: PolicyRow, state: PolicyState, known?: PolicyPod): LocalPod | undefined {
  const id = podIdentityOf(row);
  const hostIf = row.dataplane?.hostIfName;
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
