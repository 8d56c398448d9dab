import { expect } from 'chai';
import { execFileSync, type ChildProcess } from 'node:child_process';
import { describeRoot } from '../support/describe-root';
import { netnsPath, runInNetns } from './support/netns';
import { spawnInNetns } from './support/spawn-in-netns';
import { WorkloadnetNode } from './support/workloadnet-node';
import { requireProgram } from '../support/system-program';

// workloadnet with the reference portmap and bandwidth plugins chained after it (install-cni --chain),
// driven by a real containerd: hostPort and bandwidth annotations work as with any CNI network plugin.
// All traffic stays inside the test's node namespace and the pod's own.

const NODE_IP = '10.250.0.1'; // the node uplink address WorkloadnetNode gives its namespace
const HOST_PORT = 18080;
const CONTAINER_PORT = 8080;

describeRoot(
  'containerd end to end: workloadnet chained with portmap and bandwidth (linux backend, root)',
  function () {
    this.timeout(180_000);
    const node = new WorkloadnetNode({
      podCidr: '10.248.0.0/24',
      daemonArgs: ['--backend', 'linux'],
      chain: ['portmap', 'bandwidth'],
    });
    const listeners: ChildProcess[] = [];

    before(async () => node.start());
    after(async () => node.stop());
    afterEach(function () {
      for (const l of listeners.splice(0)) l.kill('SIGKILL');
      if (this.currentTest?.state === 'failed') {
        console.error(
          `--- daemon log ---\n${node.daemon?.log()}\n--- containerd log ---\n${node.containerd?.logTail(30)}`,
        );
      }
    });

    const nodeNs = (): string => netnsPath(node.nodeNetns);
    const natRules = (): string => {
      requireProgram('iptables-save');
      return execFileSync('ip', ['netns', 'exec', node.nodeNetns, 'iptables-save', '-t', 'nat'], {
        encoding: 'utf8',
      });
    };

    /** A TCP server inside the pod's namespace that answers every connection with `greeting`. */
    async function listenInPod(podNetns: string, greeting: string): Promise<void> {
      const code = `require('net').createServer((s) => s.end(${JSON.stringify(greeting)})).listen(${CONTAINER_PORT}, '0.0.0.0', () => console.log('up'))`;
      const child = spawnInNetns(podNetns, process.execPath, ['-e', code], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      listeners.push(child);
      await new Promise<void>((resolve, reject) => {
        child.stdout?.once('data', () => resolve());
        child.once('exit', (c) => reject(new Error(`listener exited with ${c}`)));
      });
    }

    /** Connects from the node's own namespace (as a client on the node would) and returns what it read. */
    function connectFromNode(host: string, port: number): Promise<string> {
      const code = `const s = require('net').connect(${port}, ${JSON.stringify(host)}); let d = ''; s.on('data', (c) => (d += c)); s.on('end', () => process.stdout.write(d)); s.on('error', (e) => { console.error(e.message); process.exit(1); }); s.setTimeout(5000, () => { console.error('timeout'); process.exit(1); });`;
      return runInNetns(nodeNs(), process.execPath, ['-e', code]);
    }

    it("reaches a pod's listener on the node's hostPort, and the rule goes with the pod", async () => {
      const id = await node.containerd.cri.runPodSandbox(
        node.containerd.podSpec('hostport', {
          portMappings: [{ protocol: 'TCP', containerPort: CONTAINER_PORT, hostPort: HOST_PORT }],
        }),
      );
      let removed = false;
      try {
        const st = await node.containerd.cri.podSandboxStatus(id);
        await listenInPod(st.netnsPath, `hello from ${id}`);
        expect(await connectFromNode(NODE_IP, HOST_PORT)).to.equal(`hello from ${id}`);
        expect(natRules()).to.contain(`--dport ${HOST_PORT}`).and.contain(`${st.ip}:${CONTAINER_PORT}`);

        for (const l of listeners.splice(0)) l.kill('SIGKILL');
        await node.containerd.cri.stopPodSandbox(id);
        await node.containerd.cri.removePodSandbox(id);
        removed = true;
        const after = natRules();
        expect(after).to.not.contain(`--dport ${HOST_PORT}`);
        expect(after).to.not.contain(st.ip);
      } finally {
        if (!removed) {
          await node.containerd.cri.stopPodSandbox(id);
          await node.containerd.cri.removePodSandbox(id);
        }
      }
    });

    it('gives a bandwidth-limited pod its shaping qdiscs on its host interface, gone with the pod', async () => {
      const id = await node.containerd.cri.runPodSandbox(
        node.containerd.podSpec('shaped', {
          annotations: { 'kubernetes.io/ingress-bandwidth': '1M', 'kubernetes.io/egress-bandwidth': '2M' },
        }),
      );
      let removed = false;
      try {
        const c = node.daemon.client;
        const [att] = (await c.call(c.raw.get, { workloadId: id, ifName: '' })).attachments;
        const hostIf = att?.result?.interfaces.find((i) => i.sandbox === '')?.name;
        expect(hostIf, 'host interface listed by Get').to.be.a('string');
        const qdiscs = execFileSync('tc', ['-n', node.nodeNetns, 'qdisc', 'show', 'dev', hostIf ?? ''], {
          encoding: 'utf8',
        });
        // Ingress to the pod is shaped on the host end (tbf); egress is redirected to an ifb device.
        expect(qdiscs).to.match(/qdisc tbf .* rate 1Mbit/);
        expect(qdiscs).to.contain('qdisc ingress');
        const ifbs = (): string[] =>
          (
            JSON.parse(
              execFileSync('ip', ['-n', node.nodeNetns, '-j', 'link', 'show', 'type', 'ifb'], {
                encoding: 'utf8',
              }) || '[]',
            ) as { ifname: string }[]
          ).map((l) => l.ifname);
        expect(ifbs()).to.have.length(1);
        const ifbQdisc = execFileSync('tc', ['-n', node.nodeNetns, 'qdisc', 'show', 'dev', ifbs()[0] ?? ''], {
          encoding: 'utf8',
        });
        expect(ifbQdisc).to.match(/qdisc tbf .* rate 2Mbit/);

        await node.containerd.cri.stopPodSandbox(id);
        await node.containerd.cri.removePodSandbox(id);
        removed = true;
        expect(ifbs()).to.deep.equal([]);
      } finally {
        if (!removed) {
          await node.containerd.cri.stopPodSandbox(id);
          await node.containerd.cri.removePodSandbox(id);
        }
      }
    });
  },
);
