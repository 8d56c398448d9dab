import * as fs from 'node:fs';
import type { AttachSpec, Backend, DataplaneResult, IpAssignment } from '../../core/backend';
import { NetnsHandle, type Netns } from '../../lib/netns/netns-handle';

// Backend tests call a backend the way the core does: with the workload's namespace open, and the
// backend's own plan. These helpers do both, so a test names only the attachment.

/** An AttachSpec as tests write it: the namespace is opened by attachTo. */
export type TestSpec = Omit<AttachSpec, 'netns'> & { netns?: Netns };

/**
 * A spec for `workloadId`'s interface (eth0 unless `over` names another) in the namespace `netns`
 * (its path and inode), MTU 1500; `over` sets anything else.
 */
export function testSpec(
  workloadId: string,
  netns: { path: string; inode: number },
  ips: IpAssignment[],
  over: Partial<TestSpec> = {},
): TestSpec {
  const ifName = over.ifName ?? 'eth0';
  return {
    key: `${workloadId}/${ifName}`,
    workloadId,
    ifName,
    netnsPath: netns.path,
    netnsInode: netns.inode,
    ips,
    mtu: 1500,
    ...over,
  };
}

/**
 * Plans (unless `planned` is given, as the core does on a repair) and attaches `spec` like the core does, with the namespace opened for the call and closed
 * after. A spec whose namespace path does not exist (backends that never enter it, e.g. the DPU
 * backend without host endpoints) gets a handle that refuses to be entered.
 */
export async function attachTo(
  backend: Backend,
  spec: TestSpec,
  planned?: DataplaneResult,
): Promise<DataplaneResult> {
  const netns =
    spec.netns ??
    (fs.existsSync(spec.netnsPath)
      ? await NetnsHandle.open(spec.netnsPath, { workload: true })
      : unopened(spec));
  try {
    const full: AttachSpec = { ...spec, netns };
    return await backend.attach(full, planned ?? backend.plan(full));
  } finally {
    if (netns !== spec.netns) netns.close();
  }
}

function unopened(spec: TestSpec): Netns {
  return {
    path: spec.netnsPath,
    fd: -1,
    inode: spec.netnsInode,
    closed: false,
    close: () => undefined,
    enter: () => {
      throw new Error(`test spec: ${spec.netnsPath} does not exist, so it cannot be entered`);
    },
  };
}
