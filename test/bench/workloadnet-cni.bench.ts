import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { DaemonProcess } from '../support/daemon-process';
import { addNetns, deleteNetns, uniqueNetnsName } from '../e2e/support/netns';
import { installReferencePlugins } from '../e2e/support/reference-plugins';
import { installWorkloadnetCni } from '../e2e/support/workloadnet-node';
import { benchContainerdPods, type ContainerdPodResult } from './containerd.bench';
import { benchCniPlugin, type ReferenceCniResult } from './reference-cni';
import { WARM_OPS_DEFAULT } from './warm-up';

// workloadnet as runtimes see it: the native forwarder executed per pod event, and whole pod lifecycles
// through containerd, with the daemon (Linux backend) running in a test-owned node namespace. Measured
// the same way as the reference plugins so the two can be compared in one run.

const SHIM = path.resolve(__dirname, '..', '..', 'bin', 'workloadnet-cni');

async function withDaemon<T>(
  podCidr: string,
  fn: (ctx: { node: string; daemon: DaemonProcess; work: string }) => Promise<T>,
): Promise<T> {
  const node = uniqueNetnsName('wnb-', 'node');
  const work = await mkdtemp(path.join(os.tmpdir(), 'wn-bench-cni-'));
  await addNetns(node);
  let daemon: DaemonProcess | undefined;
  try {
    daemon = await DaemonProcess.start({
      dir: path.join(work, 'daemon'),
      netns: node,
      args: ['--pod-cidr', podCidr, '--log-level', 'warn'],
    });
    return await fn({ node, daemon, work });
  } finally {
    await daemon?.stop().catch(() => undefined);
    await deleteNetns(node);
    await rm(work, { recursive: true, force: true });
  }
}

export function benchWorkloadnetCni(opts: {
  count: number;
  parallel: number;
  /** Untimed ADDs first, so that the daemon has settled (see warm-up.ts). */
  warmOps?: number;
}): Promise<ReferenceCniResult[]> {
  return withDaemon('10.92.0.0/16', ({ node, daemon }) =>
    benchCniPlugin({
      name: 'workloadnet-cni (linux backend)',
      binary: SHIM,
      pluginConfig: { type: 'workloadnet', socket: daemon.cniSocket },
      count: opts.count,
      parallel: opts.parallel,
      nodeNetns: node,
      serverPid: daemon.child.pid,
      warmOps: opts.warmOps ?? WARM_OPS_DEFAULT,
    }),
  );
}

export function benchWorkloadnetContainerd(count: number): Promise<ContainerdPodResult> {
  return withDaemon('10.93.0.0/16', async ({ node, daemon, work }) => {
    const cniBinDir = path.join(work, 'bin');
    const cniConfDir = path.join(work, 'conf');
    await installReferencePlugins(cniBinDir, ['loopback']);
    installWorkloadnetCni(cniBinDir, cniConfDir, daemon.cniSocket, 'wn-bench');
    return benchContainerdPods({
      cniBinDir,
      cniConfDir,
      count,
      label: 'containerd+workloadnet',
      nodeNetns: node,
    });
  });
}
