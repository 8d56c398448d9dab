import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ApiClient } from '../../cli/api-client';
import { SimProcess } from '../support/sim-process';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { addNodeUplink, NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { waitUntil } from '../support/wait-until';
import { ContainerdHarness } from './support/containerd';
import { addNetns, deleteNetns, runInNetns, uniqueNetnsName } from './support/netns';
import { installReferencePlugins } from './support/reference-plugins';
import { netnsDataplane } from '../support/simulated-dpu';

// A Multus-shaped node with a real containerd: every pod gets eth0 on the `default` network (Linux
// backend, host veth) and net1 on the `fast` network (DPU backend, the simulator in netns mode hands
// out "VFs"). containerd calls only its default conflist, so that conflist names a small delegating
// plugin that does what Multus does: it runs the workloadnet forwarder once per network, with the same
// container id, CNI_IFNAME=eth0 and the `default` config, then CNI_IFNAME=net1 and the `fast` config
// (both written by `workloadnet install-cni --network`), and answers the default network's result.
// DEL runs both, secondary first. The delegate is a test stand-in for Multus, not part of workloadnet.

const DEFAULT_CIDR = '10.248.10.0/24';
const FAST_CIDR = '10.248.20.0/24';

/** The delegating plugin: what Multus does for a pod with one additional network. */
function delegateScript(forwarder: string, defaultConf: string, fastConf: string): string {
  return `#!/bin/sh
# Test stand-in for Multus: eth0 on "default", net1 on "fast", through the workloadnet forwarder.
cat >/dev/null
case "$CNI_COMMAND" in
ADD)
  out=$(CNI_IFNAME=eth0 "${forwarder}" <"${defaultConf}") || { echo "$out"; exit 1; }
  err=$(CNI_IFNAME=net1 "${forwarder}" <"${fastConf}") || {
    CNI_COMMAND=DEL CNI_IFNAME=eth0 "${forwarder}" <"${defaultConf}" >/dev/null
    echo "$err"; exit 1; }
  echo "$out" ;;
DEL)
  err=$(CNI_IFNAME=net1 "${forwarder}" <"${fastConf}") || { echo "$err"; exit 1; }
  CNI_IFNAME=eth0 exec "${forwarder}" <"${defaultConf}" ;;
VERSION)
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]}' ;;
*)
  exit 0 ;;
esac
`;
}

describeRoot(
  'containerd end to end, Multus-shaped: eth0 on default (linux), net1 on fast (dpu) (root)',
  function () {
    this.timeout(180_000);
    const nodeNetns = uniqueNetnsName('wn-net-', 'node');
    const namespaces = new NetnsSet(`wn-net-dpu-${process.pid}-`);
    let work = '';
    let daemon: DaemonProcess;
    let sim: SimProcess | undefined;
    let containerd: ContainerdHarness | undefined;
    let configFile: string;

    const api = (): ApiClient => daemon.client;
    const attachmentsOf = async (id: string): Promise<string[]> =>
      (await api().call(api().raw.list, {})).attachments
        .filter((a) => a.workloadId === id)
        .map((a) => `${a.ifName}:${a.network}`)
        .sort();
    const usedPerNetwork = async (): Promise<Record<string, number>> =>
      Object.fromEntries(
        (await api().status()).networks.map((n) => [n.name, n.pools.reduce((sum, p) => sum + p.used, 0)]),
      );
    const startDaemon = async (): Promise<void> => {
      daemon = await DaemonProcess.start({
        dir: path.join(work, 'daemon'),
        netns: nodeNetns,
        flags: { config: configFile },
      });
      await waitUntil(async () => (await api().status()).ready, 'both networks ready', 15_000);
    };
    const runPod = async (name: string): Promise<{ id: string; ip: string; netnsPath: string }> => {
      const c = containerd as ContainerdHarness;
      const id = await c.cri.runPodSandbox(c.podSpec(name));
      const st = await c.cri.podSandboxStatus(id);
      return { id, ip: st.ip, netnsPath: st.netnsPath };
    };
    const removePod = async (id: string): Promise<void> => {
      await containerd?.cri.stopPodSandbox(id);
      await containerd?.cri.removePodSandbox(id);
    };
    const v4On = async (netnsPath: string, dev: string): Promise<string> => {
      const out = await runInNetns(netnsPath, 'ip', ['-4', '-o', 'addr', 'show', 'dev', dev]);
      return /inet (\S+)\/32/.exec(out)?.[1] ?? '';
    };

    before(async () => {
      await addNetns(nodeNetns);
      work = await mkdtemp(path.join(os.tmpdir(), 'wn-net-e2e-'));
      addNodeUplink(nodeNetns, '10.250.0.1');
      const dpu = namespaces.add();
      execFileSync('ip', ['-n', dpu.name, 'link', 'set', 'lo', 'up']);
      const agentSocket = path.join(work, 'agent.sock');
      configFile = path.join(work, 'config.json');
      await writeFile(
        configFile,
        JSON.stringify({
          dpu: { agentSocket },
          networks: [
            { name: 'default', backend: 'linux', podCidrs: [DEFAULT_CIDR] },
            { name: 'fast', backend: 'dpu', podCidrs: [FAST_CIDR] },
          ],
        }),
      );
      sim = SimProcess.start({
        socket: agentSocket,
        agentId: 'wn-net-e2e-dpu',
        stateFile: path.join(work, 'sim-state.json'),
        extra: netnsDataplane(dpu.name, `/var/run/netns/${nodeNetns}`),
      });
      await startDaemon();

      // The operator's part: the forwarder and one conflist per network, as install-cni writes them. They
      // go to a folder containerd does not read; its own conflist names the delegate instead.
      const binDir = path.join(work, 'bin');
      const confDir = path.join(work, 'conf');
      const netsDir = path.join(work, 'networks');
      await installReferencePlugins(binDir, ['loopback']);
      const install = (network: string): void =>
        void execFileSync(process.execPath, [
          CLI,
          'install-cni',
          '--bin-dir',
          binDir,
          '--conf-dir',
          netsDir,
          '--cni-socket',
          daemon.cniSocket,
          '--network',
          network,
        ]);
      install('default');
      install('fast');
      const delegateConf = async (file: string, out: string): Promise<string> => {
        const list = JSON.parse(await readFile(path.join(netsDir, file), 'utf8')) as {
          cniVersion: string;
          name: string;
          plugins: Array<Record<string, unknown>>;
        };
        await writeFile(
          out,
          JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...list.plugins[0] }),
        );
        return out;
      };
      const defaultConf = await delegateConf('05-default.conflist', path.join(work, 'default.json'));
      const fastConf = await delegateConf('90-fast.conflist', path.join(work, 'fast.json'));
      const delegate = path.join(binDir, 'multus-stand-in');
      await writeFile(delegate, delegateScript(path.join(binDir, 'workloadnet'), defaultConf, fastConf));
      await chmod(delegate, 0o755);
      await mkdir(confDir, { recursive: true });
      await writeFile(
        path.join(confDir, '10-multus-stand-in.conflist'),
        JSON.stringify({
          cniVersion: '1.0.0',
          name: 'multus-stand-in',
          plugins: [{ type: 'multus-stand-in' }],
        }),
      );
      containerd = await ContainerdHarness.start({ cniBinDir: binDir, cniConfDir: confDir, nodeNetns });
      await containerd.waitForNetworkReady();
    });

    after(async () => {
      try {
        await containerd?.stop();
      } finally {
        await daemon?.stop().catch(() => undefined);
        await sim?.stop();
        namespaces.cleanup();
        await deleteNetns(nodeNetns);
        if (work && existsSync(work)) await rm(work, { recursive: true, force: true });
      }
    });

    afterEach(function () {
      if (this.currentTest?.state === 'failed')
        console.error(
          `--- daemon log ---\n${daemon?.log()}\n--- containerd log ---\n${containerd?.logTail(30)}`,
        );
    });

    it('gives each pod eth0 on default and net1 on fast; traffic on each; StopPodSandbox removes both', async () => {
      const a = await runPod('multi-a');
      const b = await runPod('multi-b');
      try {
        for (const pod of [a, b])
          expect(await attachmentsOf(pod.id), pod.id).to.deep.equal(['eth0:default', 'net1:fast']);
        expect(a.ip.startsWith('10.248.10.'), a.ip).to.equal(true);
        const aFast = await v4On(a.netnsPath, 'net1');
        const bFast = await v4On(b.netnsPath, 'net1');
        expect(aFast.startsWith('10.248.20.'), aFast).to.equal(true);
        const routes = await runInNetns(a.netnsPath, 'ip', ['-4', 'route', 'show']);
        expect(routes.match(/^default /gm), routes).to.have.length(1);
        expect(routes).to.match(/^default via 169\.254\.1\.1 dev eth0/m);
        expect(routes).to.match(
          new RegExp(`^${FAST_CIDR.replace(/\./g, '\\.')} via 169\\.254\\.1\\.1 dev net1`, 'm'),
        );
        await runInNetns(a.netnsPath, 'ping', ['-c', '1', '-W', '2', '-I', 'eth0', b.ip]);
        await runInNetns(a.netnsPath, 'ping', ['-c', '1', '-W', '2', '-I', 'net1', bFast]);
        await runInNetns(b.netnsPath, 'ping', ['-c', '1', '-W', '2', aFast]);
      } finally {
        await removePod(a.id);
        await removePod(b.id);
      }
      expect(await attachmentsOf(a.id)).to.deep.equal([]);
      expect(await attachmentsOf(b.id)).to.deep.equal([]);
      expect(await usedPerNetwork()).to.deep.equal({ default: 0, fast: 0 });
    });

    it('removes both on StopPodSandbox issued while the daemon is down (SIGKILL, started again 1.5 s later)', async () => {
      const pod = await runPod('multi-restart');
      expect(await attachmentsOf(pod.id)).to.deep.equal(['eth0:default', 'net1:fast']);
      await daemon.kill('SIGKILL');
      const stopping = (containerd as ContainerdHarness).cri.stopPodSandbox(pod.id);
      await new Promise((r) => setTimeout(r, 1500));
      await startDaemon();
      await stopping;
      expect(await attachmentsOf(pod.id)).to.deep.equal([]);
      await containerd?.cri.removePodSandbox(pod.id);
      expect(await usedPerNetwork()).to.deep.equal({ default: 0, fast: 0 });
      const st = await api().status();
      expect(st.reconcile?.released ?? 0).to.equal(0);
    });

    it('removes both on Stop + Remove after the daemon was SIGKILLed and restarted between Run and Stop', async () => {
      const pod = await runPod('multi-survivor');
      await daemon.kill('SIGKILL');
      await startDaemon();
      expect(await attachmentsOf(pod.id), 'both survive the restart').to.deep.equal([
        'eth0:default',
        'net1:fast',
      ]);
      const fast = await v4On(pod.netnsPath, 'net1');
      expect(fast.startsWith('10.248.20.'), fast).to.equal(true);
      await removePod(pod.id);
      expect(await attachmentsOf(pod.id)).to.deep.equal([]);
      expect(await usedPerNetwork()).to.deep.equal({ default: 0, fast: 0 });
    });
  },
);
