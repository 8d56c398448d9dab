import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { ContainerdHarness } from '../e2e/support/containerd';
import { addNetns, deleteNetns } from '../e2e/support/netns';
import { installReferenceBridge } from '../e2e/support/reference-plugins';
import { percentile, timeMs } from './stats';

// Whole pod lifecycles through a real containerd: what a kubelet waits for per pod, CNI included. Run
// with the reference plugins and with workloadnet's CNI executable side by side, the difference is the
// network plugin's share.

export interface ContainerdPodBenchOptions {
  /** CNI bin folder, already holding the plugins (and `loopback`, which containerd always runs). */
  cniBinDir: string;
  /** CNI conf folder, already holding the conflist to measure. */
  cniConfDir: string;
  /** Pods measured, one after another. */
  count: number;
  /** Name of the result row, e.g. "containerd+bridge". */
  label: string;
  /**
   * Node namespace to run containerd in. Give the one the plugin expects when it has host-side state
   * there (a daemon running in it); by default a fresh one is made and deleted.
   */
  nodeNetns?: string;
}

export interface ContainerdPodResult {
  name: string;
  /** RunPodSandbox + StopPodSandbox + RemovePodSandbox, per pod. */
  p50Ms: number;
  p99Ms: number;
  /** RunPodSandbox alone (the part a pod start waits for). */
  runP50Ms: number;
  /** StopPodSandbox + RemovePodSandbox. */
  teardownP50Ms: number;
}

/**
 * Starts a private containerd with the given CNI setup and measures `count` sequential pod lifecycles.
 * One pod is run first and not counted: it pays one-time costs (snapshot preparation, the plugin's
 * first-time setup such as creating a bridge).
 */
export async function benchContainerdPods(opts: ContainerdPodBenchOptions): Promise<ContainerdPodResult> {
  if (opts.count < 1) throw new Error('count must be at least 1');
  const ownNetns = opts.nodeNetns === undefined;
  const nodeNetns = opts.nodeNetns ?? `wne-cb-${randomBytes(3).toString('hex')}`;
  if (ownNetns) await addNetns(nodeNetns);
  let harness: ContainerdHarness | undefined;
  try {
    harness = await ContainerdHarness.start({
      cniBinDir: opts.cniBinDir,
      cniConfDir: opts.cniConfDir,
      nodeNetns,
    });
    await harness.waitForNetworkReady();
    const h = harness;
    const lifecycle = async (name: string): Promise<{ run: number; teardown: number }> => {
      let id = '';
      const run = await timeMs(async () => {
        id = await h.cri.runPodSandbox(h.podSpec(name));
      });
      const teardown = await timeMs(async () => {
        await h.cri.stopPodSandbox(id);
        await h.cri.removePodSandbox(id);
      });
      return { run, teardown };
    };

    await lifecycle('warm-up');
    const total: number[] = [];
    const run: number[] = [];
    const teardown: number[] = [];
    for (let i = 0; i < opts.count; i++) {
      const sample = await lifecycle(`bench-${i}`);
      run.push(sample.run);
      teardown.push(sample.teardown);
      total.push(sample.run + sample.teardown);
    }
    return {
      name: opts.label,
      p50Ms: percentile(total, 50),
      p99Ms: percentile(total, 99),
      runP50Ms: percentile(run, 50),
      teardownP50Ms: percentile(teardown, 50),
    };
  } finally {
    try {
      await harness?.stop();
    } finally {
      if (ownNetns) await deleteNetns(nodeNetns);
    }
  }
}

/** The reference row: containerd with Debian's bridge + host-local, in a throwaway CNI setup. */
export async function benchContainerdWithReferenceBridge(count: number): Promise<ContainerdPodResult> {
  const work = await mkdtemp(path.join(os.tmpdir(), 'wne-bench-ctrd-'));
  try {
    const dirs = await installReferenceBridge(work, {
      name: 'wne-bench-bridge',
      bridge: 'wne-cbr0',
      subnet: '10.254.0.0/16',
    });
    return await benchContainerdPods({ ...dirs, count, label: 'containerd+bridge+host-local' });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

if (require.main === module) {
  const count = Number(process.argv[2] ?? 20);
  benchContainerdWithReferenceBridge(count)
    .then((r) => {
      console.log(
        `${r.name}: pod run+stop+remove p50 ${r.p50Ms.toFixed(1)} ms p99 ${r.p99Ms.toFixed(1)} ms ` +
          `(run p50 ${r.runP50Ms.toFixed(1)} ms, stop+remove p50 ${r.teardownP50Ms.toFixed(1)} ms, ${count} pods)`,
      );
    })
    .catch((err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    });
}
