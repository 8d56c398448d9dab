import { expect } from 'chai';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { ContainerdHarness } from './support/containerd';
import { addNetns, deleteNetns, runInNetns, uniqueNetnsName } from './support/netns';
import { installReferenceBridge } from './support/reference-plugins';

// Proves the containerd harness end to end with Debian's reference plugins: a real containerd, driven
// over CRI like a kubelet, calls bridge + host-local + loopback for real pod sandboxes. The workloadnet
// end-to-end tests follow the same shape with the workloadnet CNI executable in cniBinDir instead.

const SUBNET_PREFIX = '10.252.0.';

describe('containerd with the reference bridge plugin', function () {
  this.timeout(120_000);

  const nodeNetns = uniqueNetnsName('wne-', 'node');
  const networkName = `wne-ref-${nodeNetns.slice(-6)}`;
  let work = '';
  let ipamDir = '';
  let harness: ContainerdHarness | undefined;

  before(async () => {
    await addNetns(nodeNetns);
    work = await mkdtemp(path.join(os.tmpdir(), 'wne-e2e-'));
    ipamDir = path.join(work, 'ipam');
    const dirs = await installReferenceBridge(work, {
      name: networkName,
      bridge: `wne-br-${nodeNetns.slice(-6)}`,
      subnet: `${SUBNET_PREFIX}0/24`,
    });
    harness = await ContainerdHarness.start({ ...dirs, nodeNetns });
    await harness.waitForNetworkReady();
  });

  after(async () => {
    try {
      await harness?.stop();
    } finally {
      await deleteNetns(nodeNetns);
      if (work) await rm(work, { recursive: true, force: true });
    }
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed' && harness) {
      console.error(`--- containerd log (${harness.logPath}) ---\n${harness.logTail(40)}`);
    }
  });

  const ctrd = (): ContainerdHarness => {
    if (!harness) throw new Error('containerd harness did not start');
    return harness;
  };

  it('runs a pod sandbox with an IP from the conflist subnet inside its own cni- namespace', async () => {
    const id = await ctrd().cri.runPodSandbox(ctrd().podSpec('solo'));
    try {
      const status = await ctrd().cri.podSandboxStatus(id);
      expect(status.state).to.equal('SANDBOX_READY');
      expect(status.ip.startsWith(SUBNET_PREFIX), status.ip).to.equal(true);
      expect(status.netnsPath).to.match(/^\/var\/run\/netns\/cni-/);
      const addrs = await runInNetns(status.netnsPath, 'ip', ['-4', '-o', 'addr', 'show', 'dev', 'eth0']);
      expect(addrs).to.contain(`inet ${status.ip}/24`);
    } finally {
      await ctrd().cri.stopPodSandbox(id);
      await ctrd().cri.removePodSandbox(id);
    }
  });

  it('lets two pods on the same bridge reach each other', async () => {
    const a = await ctrd().cri.runPodSandbox(ctrd().podSpec('ping-a'));
    const b = await ctrd().cri.runPodSandbox(ctrd().podSpec('ping-b'));
    try {
      const [sa, sb] = await Promise.all([ctrd().cri.podSandboxStatus(a), ctrd().cri.podSandboxStatus(b)]);
      expect(sa.ip).to.not.equal(sb.ip);
      await runInNetns(sa.netnsPath, 'ping', ['-c', '1', '-W', '2', sb.ip]);
      await runInNetns(sb.netnsPath, 'ping', ['-c', '1', '-W', '2', sa.ip]);
    } finally {
      for (const id of [a, b]) {
        await ctrd().cri.stopPodSandbox(id);
        await ctrd().cri.removePodSandbox(id);
      }
    }
  });

  it('removes the pod namespace and releases its IP on StopPodSandbox and RemovePodSandbox', async () => {
    const id = await ctrd().cri.runPodSandbox(ctrd().podSpec('teardown'));
    const status = await ctrd().cri.podSandboxStatus(id);
    const leases = path.join(ipamDir, networkName);
    expect(await readdir(leases)).to.include(status.ip);
    expect(existsSync(status.netnsPath)).to.equal(true);

    await ctrd().cri.stopPodSandbox(id);
    expect(existsSync(status.netnsPath), `${status.netnsPath} still exists after stop`).to.equal(false);
    expect(await readdir(leases)).to.not.include(status.ip);

    await ctrd().cri.removePodSandbox(id);
    const remaining = await ctrd().cri.listPodSandboxes();
    expect(remaining.map((p) => p.id)).to.not.include(id);
  });
});
