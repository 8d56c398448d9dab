import { expect } from 'chai';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { cgroupDirsOf } from './support/cgroup';
import { ContainerdHarness } from './support/containerd';
import { addNetns, deleteNetns, uniqueNetnsName } from './support/netns';
import { installReferenceBridge, type CniDirs } from './support/reference-plugins';

// The harness must leave nothing behind, or every later e2e run on the machine inherits leaked pod
// namespaces, shims and cgroups. These cases leave a pod running on purpose.

describe('containerd harness cleanup', function () {
  this.timeout(120_000);

  const nodeNetns = uniqueNetnsName('wne-', 'node');
  let work = '';
  let dirs: CniDirs;

  before(async () => {
    await addNetns(nodeNetns);
    work = await mkdtemp(path.join(os.tmpdir(), 'wne-e2e-'));
    dirs = await installReferenceBridge(work, {
      name: 'wne-cleanup',
      bridge: `wne-br-${nodeNetns.slice(-6)}`,
      subnet: '10.252.1.0/24',
    });
  });

  after(async () => {
    await deleteNetns(nodeNetns);
    if (work) await rm(work, { recursive: true, force: true });
  });

  async function startWithRunningPod(): Promise<{ harness: ContainerdHarness; netnsPath: string }> {
    const harness = await ContainerdHarness.start({ ...dirs, nodeNetns });
    try {
      await harness.waitForNetworkReady();
      const id = await harness.cri.runPodSandbox(harness.podSpec('left-running'));
      const { netnsPath } = await harness.cri.podSandboxStatus(id);
      expect(existsSync(netnsPath)).to.equal(true);
      return { harness, netnsPath };
    } catch (err) {
      await harness.stop().catch(() => undefined);
      throw err;
    }
  }

  async function expectNothingLeft(harness: ContainerdHarness, netnsPath: string): Promise<void> {
    expect(existsSync(netnsPath), `${netnsPath} left behind`).to.equal(false);
    expect(existsSync(harness.dir), `${harness.dir} left behind`).to.equal(false);
    expect(await processesMentioning(harness.socketPath), 'shims left behind').to.deep.equal([]);
    const cgroups = (await cgroupDirsOf(harness.cgroupParent, process.pid)).filter((d) => existsSync(d));
    expect(cgroups, 'pod cgroups left behind').to.deep.equal([]);
  }

  it('stops and removes a pod that is still running when the harness stops', async () => {
    const { harness, netnsPath } = await startWithRunningPod();
    await harness.stop();
    await expectNothingLeft(harness, netnsPath);
    expect(existsSync(harness.logPath), 'log kept although nothing failed').to.equal(false);
  });

  it('cleans up after containerd was killed with a pod running, and reports that it had died', async () => {
    const { harness, netnsPath } = await startWithRunningPod();
    process.kill(harness.pid, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 200));
    let stopError: unknown;
    await harness.stop().catch((err: unknown) => (stopError = err));
    try {
      expect(String(stopError)).to.contain('containerd had already exited');
      await expectNothingLeft(harness, netnsPath);
    } finally {
      await rm(harness.logPath, { force: true });
    }
  });
});

async function processesMentioning(text: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes(text)) pids.push(Number(entry));
  }
  return pids;
}
