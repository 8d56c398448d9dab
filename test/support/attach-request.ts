import type { AttachRequest, DetachRequest } from '../../proto/gen/workloadnet/v1/workload';

// Workload API requests as tests write them: a workload, the namespace path and the interface name;
// everything else empty unless the test says otherwise.

export function attachRequest(
  workloadId: string,
  netnsPath: string,
  ifName = 'eth0',
  more: Partial<AttachRequest> = {},
): AttachRequest {
  return {
    workloadId,
    netns: { netnsPath, ifName, mtu: 0 },
    containerId: '',
    pod: undefined,
    dns: undefined,
    network: '',
    dpu: '',
    ...more,
  };
}

export function detachRequest(workloadId: string, netnsPath: string, ifName = 'eth0'): DetachRequest {
  return { workloadId, netns: { netnsPath, ifName, mtu: 0 } };
}
