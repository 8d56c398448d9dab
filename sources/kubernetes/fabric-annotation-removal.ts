import { CoreV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { FABRIC_ANNOTATION } from './fabric-annotation';
import { describeApiError, loadKubeConfig } from './kubernetes-pool-source';

// The uninstall's step on the API: this node's fabric annotation goes, so that peers still running
// (a partial uninstall, a rollback to another network) stop reading a record no daemon keeps. Removed
// through nodes/status with a JSON merge patch (null deletes the key), as it was written: the RBAC the
// daemon had covers it, and nothing else of the Node changes.

export interface AnnotationRemovalOptions {
  nodeName: string;
  /** kubeconfig file; empty = $KUBECONFIG, else the in-cluster service account. */
  kubeconfig: string;
  dryRun?: boolean;
}

/** Whether the annotation was there (and, unless dryRun, is gone); throws in words when the API fails. */
export async function removeFabricAnnotation(opts: AnnotationRemovalOptions): Promise<boolean> {
  const api = loadKubeConfig(opts.kubeconfig).makeApiClient(CoreV1Api);
  try {
    const node = await api.readNode({ name: opts.nodeName });
    if (node.metadata?.annotations?.[FABRIC_ANNOTATION] === undefined) return false;
    if (opts.dryRun) return true;
    await api.patchNodeStatus(
      { name: opts.nodeName, body: { metadata: { annotations: { [FABRIC_ANNOTATION]: null } } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    return true;
  } catch (err) {
    throw new Error(
      `the ${FABRIC_ANNOTATION} annotation of Node ${opts.nodeName} could not be removed: ${describeApiError(err)}`,
    );
  }
}
