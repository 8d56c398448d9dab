import { CniError, CniErrorCode } from './cni-error';

// CNI_ARGS: "K=V;K=V". Kubernetes runtimes send the pod's identity here. Like libcni's LoadArgs, an
// unknown key is refused unless the caller sets IgnoreUnknown, so that a typo in a key we act on does not
// go unnoticed; containerd and CRI-O always set IgnoreUnknown=1.

export interface CniArgs {
  podNamespace?: string;
  podName?: string;
  podUid?: string;
  podInfraContainerId?: string;
  /** WORKLOADNET_DPU: the DPU agent this pod's port goes to (DPU backend). */
  dpu?: string;
  /** Every pair as received, known or not. */
  all: Record<string, string>;
}

const KNOWN_KEYS = new Set([
  'IgnoreUnknown',
  'K8S_POD_NAMESPACE',
  'K8S_POD_NAME',
  'K8S_POD_UID',
  'K8S_POD_INFRA_CONTAINER_ID',
  'WORKLOADNET_DPU',
]);

function parseBool(value: string): boolean {
  const v = value.toLowerCase();
  if (v === '1' || v === 'true') return true;
  if (v === '0' || v === 'false') return false;
  throw new CniError(
    CniErrorCode.INVALID_ENVIRONMENT,
    `CNI_ARGS: IgnoreUnknown must be 1, 0, true or false, not "${value}"`,
  );
}

export function parseCniArgs(raw: string | undefined): CniArgs {
  const all: Record<string, string> = {};
  if (raw === undefined || raw === '') return { all };
  for (const pair of raw.split(';')) {
    // A trailing ";" is common in hand-written calls and carries no meaning.
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    if (eq <= 0) {
      throw new CniError(CniErrorCode.INVALID_ENVIRONMENT, `CNI_ARGS: "${pair}" is not a KEY=VALUE pair`);
    }
    // Split at the first "=" only: values such as base64 text may contain more.
    all[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const ignoreUnknown = all.IgnoreUnknown !== undefined && parseBool(all.IgnoreUnknown);
  if (!ignoreUnknown) {
    const unknown = Object.keys(all).filter((k) => !KNOWN_KEYS.has(k));
    if (unknown.length > 0) {
      throw new CniError(
        CniErrorCode.INVALID_ENVIRONMENT,
        `CNI_ARGS: unknown keys ${unknown.join(', ')} (add IgnoreUnknown=1 to pass keys workloadnet does not use)`,
      );
    }
  }
  const args: CniArgs = { all };
  if (all.K8S_POD_NAMESPACE) args.podNamespace = all.K8S_POD_NAMESPACE;
  if (all.K8S_POD_NAME) args.podName = all.K8S_POD_NAME;
  if (all.K8S_POD_UID) args.podUid = all.K8S_POD_UID;
  if (all.K8S_POD_INFRA_CONTAINER_ID) args.podInfraContainerId = all.K8S_POD_INFRA_CONTAINER_ID;
  if (all.WORKLOADNET_DPU) args.dpu = all.WORKLOADNET_DPU;
  return args;
}
