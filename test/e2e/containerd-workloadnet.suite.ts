import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { ApiClient } from '../../cli/api-client';
import { CLI } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { runInNetns } from './support/netns';
import { WorkloadnetNode, type WorkloadnetNodeOptions } from './support/workloadnet-node';

// A real containerd (Debian's 1.6 with its CRI plugin) creates pod sandboxes and calls workloadnet
// through the native forwarder, exactly as on a Kubernetes node. The same suite runs per backend.

export function containerdSuite(
  backendName: string,
  opts: WorkloadnetNodeOptions & {
    subnetPrefix: string;
    /** Why an ADD during a restart cannot succeed yet on this backend; skips that case, saying so. */
    addDuringRestartGap?: string;
  },
): void {
  describeRoot(`containerd end to end with workloadnet: ${backendName} backend (root)`, function () {
    this.timeout(180_000);
    const node = new WorkloadnetNode(opts);

    before(async () => node.start());
    after(async () => node.stop());
    afterEach(function () {
      if (this.currentTest?.state === 'failed') {
        console.error(
          `--- daemon log ---\n${node.daemon?.log()}\n--- containerd log ---\n${node.containerd?.logTail(30)}`,
        );
      }
    });

    const api = (): ApiClient => node.daemon.client;
    const attachments = async () => (await api().call(api().raw.list, {})).attachments;
    const used = async () => (await api().status()).pools.reduce((n, p) => n + p.used, 0);

    async function runPod(name: string): Promise<{ id: string; ip: string; netnsPath: string }> {
      const id = await node.containerd.cri.runPodSandbox(node.containerd.podSpec(name));
      const st = await node.containerd.cri.podSandboxStatus(id);
      return { id, ip: st.ip, netnsPath: st.netnsPath };
    }
    async function removePod(id: string): Promise<void> {
      await node.containerd.cri.stopPodSandbox(id);
      await node.containerd.cri.removePodSandbox(id);
    }

    it('gives a pod its address from workloadnet, keyed by the sandbox id with the pod as metadata', async () => {
      const pod = await runPod('web');
      try {
        expect(pod.ip.startsWith(opts.subnetPrefix), pod.ip).to.equal(true);
        // The seed case: containerd passes a bind-mounted /var/run/netns/cni-… path with no process.
        expect(pod.netnsPath).to.match(/^\/var\/run\/netns\/cni-/);
        const att = (await attachments()).find((a) => a.workloadId === pod.id);
        expect(att?.ifName).to.equal('eth0');
        expect(att?.pod?.name).to.equal('web');
        expect(att?.pod?.namespace).to.equal('default');
        expect(att?.result?.ips[0]?.cidr).to.equal(`${pod.ip}/32`);
        const addrs = await runInNetns(pod.netnsPath, 'ip', ['-4', '-o', 'addr', 'show', 'dev', 'eth0']);
        expect(addrs).to.contain(`inet ${pod.ip}/32`);
        // What an operator sees: the address as text, the namespace, the pod and where it is placed.
        const shown = execFileSync(
          process.execPath,
          [CLI, 'inspect', pod.id, '--socket', node.daemon.socket],
          {
            encoding: 'utf8',
          },
        );
        expect(shown).to.match(new RegExp(`addresses:\\s+${pod.ip.replace(/\./g, '\\.')}/32`));
        expect(shown)
          .to.contain(pod.netnsPath)
          .and.match(/pod:\s+default\/web \(uid /);
        expect(shown).to.match(
          att?.result?.backend === 'dpu' ? /dpu:\s+agent \S+, port / : /host side:\s+\S+/,
        );
      } finally {
        await removePod(pod.id);
      }
    });

    it('lets two pods exchange traffic', async () => {
      const a = await runPod('ping-a');
      const b = await runPod('ping-b');
      try {
        await runInNetns(a.netnsPath, 'ping', ['-c', '1', '-W', '2', b.ip]);
        await runInNetns(b.netnsPath, 'ping', ['-c', '1', '-W', '2', a.ip]);
      } finally {
        await removePod(a.id);
        await removePod(b.id);
      }
    });

    it('detaches and releases everything on StopPodSandbox + RemovePodSandbox', async () => {
      const before = await used();
      const pod = await runPod('short-lived');
      expect(await used()).to.equal(before + 1);
      await removePod(pod.id);
      expect(await used()).to.equal(before);
      expect((await attachments()).some((a) => a.workloadId === pod.id)).to.equal(false);
      expect(existsSync(pod.netnsPath)).to.equal(false);
    });

    it('starts 10 pods concurrently, all with distinct addresses', async () => {
      const pods = await Promise.all(Array.from({ length: 10 }, (_, i) => runPod(`burst-${i}`)));
      try {
        const ips = pods.map((p) => p.ip);
        expect(new Set(ips).size).to.equal(10);
        for (const ip of ips) expect(ip.startsWith(opts.subnetPrefix), ip).to.equal(true);
      } finally {
        await Promise.all(pods.map((p) => removePod(p.id)));
      }
      expect(await used()).to.equal(0);
    });

    // The forwarder waits for the daemon's socket while it is down: neither call fails, so an operator
    // sees no network errors on an upgrade or a crash.
    const gap = opts.addDuringRestartGap;
    (gap ? it.skip : it)(
      `serves a RunPodSandbox issued while the daemon is down (SIGKILL, started again 1.5 s later)${gap ? ` [skipped: ${gap}]` : ''}`,
      async () => {
        await node.daemon.kill('SIGKILL');
        const pending = runPod('born-in-restart');
        await new Promise((r) => setTimeout(r, 1500));
        await node.startDaemon();
        const pod = await pending;
        try {
          expect(pod.ip.startsWith(opts.subnetPrefix), pod.ip).to.equal(true);
          const att = (await attachments()).find((a) => a.workloadId === pod.id);
          expect(att?.result?.ips[0]?.cidr).to.equal(`${pod.ip}/32`);
        } finally {
          await removePod(pod.id);
        }
        expect(await used()).to.equal(0);
      },
    );

    it('serves a StopPodSandbox issued while the daemon is down (SIGKILL, started again 1.5 s later)', async () => {
      const pod = await runPod('stopped-in-restart');
      await node.daemon.kill('SIGKILL');
      const stopping = node.containerd.cri.stopPodSandbox(pod.id);
      await new Promise((r) => setTimeout(r, 1500));
      await node.startDaemon();
      await stopping;
      expect((await attachments()).some((a) => a.workloadId === pod.id)).to.equal(false);
      await node.containerd.cri.removePodSandbox(pod.id);
      expect(await used()).to.equal(0);
    });

    it('cleans up completely on Stop + Remove after the daemon was SIGKILLed and restarted', async () => {
      const pod = await runPod('survivor');
      await node.restartDaemonAfterSigkill();
      expect(
        (await attachments()).some((a) => a.workloadId === pod.id),
        'attachment survives the restart',
      ).to.equal(true);
      await removePod(pod.id);
      expect((await attachments()).some((a) => a.workloadId === pod.id)).to.equal(false);
      expect(await used()).to.equal(0);
    });
  });
}
