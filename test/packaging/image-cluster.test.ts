import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { netnsPath, type TestNamespace } from '../support/netns';
import { useNodeFixture } from '../support/node-fixture';
import { requireProgram } from '../support/system-program';
import { waitUntil } from '../support/wait-until';
import { StandInKubeApiServer } from '../support/standin-kube-apiserver';
import { CniChain, type CniCall, type CniConflist } from './cni-chain';
import { buildImage, imageSkipReason, type Built } from './image-build';
import { httpGetIn, tcpAsk, TcpListeners } from '../support/netns-tcp';
import {
  container,
  httpProbe,
  nodePathOf,
  podman,
  podmanRun,
  readManifest,
  type NodeView,
} from './daemonset-podman';

// The manifest of packaging/kubernetes/workloadnet.yaml run unchanged, as a cluster runs it: its
// ConfigMap as it is (the Kubernetes pool source), its init container, then its daemon container with
// the service account kubelet mounts and the KUBERNETES_SERVICE_HOST/PORT it sets, against the stand-in
// API server over TLS. The stand-in listens inside the node namespace (the containers' host network),
// where its Node has this node's spec.podCIDRs and NetworkUnavailable True. The node namespace is a
// node as kubeadm leaves it: IPv4 forwarding on, IPv6 forwarding off, and the daemon sees /proc/sys
// read-only, as any unprivileged container does. Pods are added through the installed conflist
// (the forwarder, then portmap and bandwidth) as libcni runs it; an "outside" namespace on the node's
// uplink knows no pod range, as an upstream router does not.

const why = imageSkipReason();
const describeIf = why === '' ? describe : describe.skip;

const NODE_NAME = 'test-node';
/** The node's address on its uplink, and a host beyond it outside every cluster range. */
const NODE_ADDRESS = '198.51.100.1';
const OUTSIDE_ADDRESS = '198.51.100.2';
const POD_CIDR = '10.244.37.0/24';
const HOST_PORT = 30437;
const POD_PORT = 8080;
const OUTSIDE_PORT = 8081;

interface Pod {
  ns: TestNamespace;
  /** The runtime's call, as DEL repeats it. */
  call: CniCall;
  ip: string;
  addResult: unknown;
}

describeIf(`The manifest unchanged, as a cluster runs it (podman, stand-in API over TLS)${why}`, function () {
  // A first build makes the Debian root file system (a few minutes); later ones reuse it.
  this.timeout(25 * 60_000);
  const fx = useNodeFixture({ prefix: 'wn-imgc-', shape: 'loopback' });
  const manifest = readManifest();
  const daemon = container(manifest.pod, 'workloadnet');
  const daemonName = `wn-imgc-daemon-${process.pid}`;
  const listeners = new TcpListeners();
  const pods: Pod[] = [];
  let built: Built;
  let view: NodeView;
  let api: StandInKubeApiServer;
  let outside: TestNamespace;
  let chain: CniChain;

  const sysctl = (ns: string, key: string): string =>
    execFileSync('ip', ['netns', 'exec', ns, 'cat', `/proc/sys/${key}`], { encoding: 'utf8' }).trim();
  const condition = () =>
    api.node(NODE_NAME)?.status?.conditions?.find((c) => c.type === 'NetworkUnavailable');

  before(async () => {
    // portmap, run on the node as a runtime runs it, writes the node's rules with iptables.
    requireProgram('iptables');
    built = await buildImage(path.join(fx.dir, 'rootfs.tar'));
    // The node's uplink, to a host outside the cluster that has no route to any pod range.
    outside = fx.namespaces.add('out');
    const ip = (ns: string, ...args: string[]): void => void execFileSync('ip', ['-n', ns, ...args]);
    ip(outside.name, 'link', 'set', 'lo', 'up');
    ip(fx.node, 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', outside.name);
    ip(fx.node, 'addr', 'add', `${NODE_ADDRESS}/24`, 'dev', 'up0');
    ip(fx.node, 'link', 'set', 'up0', 'up');
    ip(outside.name, 'addr', 'add', `${OUTSIDE_ADDRESS}/24`, 'dev', 'eth0');
    ip(outside.name, 'link', 'set', 'eth0', 'up');
    // The host beyond the uplink is the node's gateway (pods' traffic to anywhere leaves through it).
    ip(fx.node, 'route', 'add', 'default', 'via', OUTSIDE_ADDRESS, 'dev', 'up0');
    // IPv4 forwarding on (kubeadm checks it); IPv6 forwarding off, as a new namespace has it.
    execFileSync('ip', ['netns', 'exec', fx.node, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);

    api = await StandInKubeApiServer.start(path.join(fx.dir, 'api'), {
      netns: netnsPath(fx.node),
      addresses: [NODE_ADDRESS],
    });
    api.setNode(NODE_NAME, [POD_CIDR]);
    api.setAddresses(NODE_NAME, [{ type: 'InternalIP', address: NODE_ADDRESS }]);
    api.setConditions(NODE_NAME, [
      { type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated', message: 'no pod network' },
    ]);
    view = {
      root: path.join(fx.dir, 'node'),
      configDir: path.join(fx.dir, 'config'),
      netns: fx.node,
      nodeName: NODE_NAME,
      apiServer: {
        serviceAccountDir: api.serviceAccount(path.join(fx.dir, 'serviceaccount'), 'workloadnet'),
        host: NODE_ADDRESS,
        port: api.listenPort,
      },
    };
    fs.mkdirSync(view.configDir, { recursive: true });
    fs.writeFileSync(path.join(view.configDir, 'config.json'), manifest.configJson);
  });

  after(async () => {
    listeners.stopAll();
    for (const p of pods.splice(0)) await chain?.del(p.call, p.addResult).catch(() => undefined);
    await podman(['rm', '--force', '--time', '15', daemonName]);
    await api?.stop();
  });

  afterEach(async function () {
    if (this.currentTest?.state !== 'failed') return;
    const logs = await podman(['logs', '--tail', '60', daemonName]);
    const status = await podman(['exec', daemonName, 'workloadnet', 'status']);
    console.error(`--- daemon log ---\n${logs.stdout}${logs.stderr}\n--- status ---\n${status.stdout}`);
    console.error(`--- Node ---\n${JSON.stringify(api?.node(NODE_NAME), null, 2)}`);
    const net = (ns: string, cmd: string): string =>
      execFileSync('ip', ['netns', 'exec', ns, 'sh', '-c', `${cmd} 2>&1 || true`], { encoding: 'utf8' });
    console.error(`--- node network ---\n${net(fx.node, 'ip route; ip neigh; nft list ruleset')}`);
  });

  /** A pod namespace added through the installed chain, with the runtime's capability arguments. */
  async function addPod(capabilityArgs?: Record<string, unknown>): Promise<Pod> {
    const ns = fx.namespaces.add('pod');
    const call: CniCall = { containerId: `imgc-${ns.name}`, netns: ns.path, capabilityArgs };
    // As the kubelet runs a pod: it is in the API before its sandbox is (NetworkPolicy reads its labels).
    api.putPod({ namespace: 'default', name: call.containerId, nodeName: NODE_NAME });
    const addResult = await chain.add(call);
    const ip = (addResult as { ips: Array<{ address: string }> }).ips[0]?.address.split('/')[0] ?? '';
    const pod = { ns, call, ip, addResult };
    pods.push(pod);
    return pod;
  }

  it('runs the daemon on a node with IPv6 forwarding off, where it sees /proc/sys read-only', async () => {
    expect(sysctl(fx.node, 'net/ipv6/conf/all/forwarding')).to.equal('0');
    const init = await podmanRun(view, manifest.pod, container(manifest.pod, 'install-cni'), built.image);
    expect(init.code, init.stderr).to.equal(0);
    const run = await podmanRun(view, manifest.pod, daemon, built.image, daemonName);
    expect(run.code, run.stderr).to.equal(0);
    // What the daemon's own process would get writing a sysctl: the file system says no.
    const write = await podman([
      'exec',
      daemonName,
      'node',
      '-e',
      "try { require('fs').writeFileSync('/proc/sys/net/ipv6/conf/all/forwarding', '1'); console.log('written') } catch (e) { console.log(e.code) }",
    ]);
    expect(write.stdout.trim(), write.stderr).to.equal('EROFS');
    const mounts = await podman([
      'exec',
      daemonName,
      'node',
      '-e',
      "process.stdout.write(require('fs').readFileSync('/proc/self/mountinfo', 'utf8'))",
    ]);
    const procSys = mounts.stdout.split('\n').find((l) => l.split(' ')[4] === '/proc/sys');
    expect(procSys?.split(' ')[5]?.split(','), '/proc/sys mount options').to.include('ro');
  });

  it("becomes ready by the manifest's readiness probe, and sets its Node's NetworkUnavailable to False", async () => {
    await waitUntil(
      async () => (await httpProbe(view, daemon, 'readinessProbe')) === 200,
      'the readiness probe to pass',
      120_000,
      { intervalMs: 500 },
    );
    await waitUntil(() => condition()?.status === 'False', 'NetworkUnavailable to become False', 30_000);
    expect(condition()).to.include({ status: 'False', reason: 'WorkloadnetIsUp' });
    // The daemon reached the API through the mounted service account, and left IPv6 forwarding alone.
    expect(api.count('watch')).to.be.greaterThan(0);
    expect(sysctl(fx.node, 'net/ipv6/conf/all/forwarding')).to.equal('0');
  });

  it('adds a pod through the installed chain that reaches a host outside the cluster ranges as the node', async () => {
    const conflistFile = path.join(view.root, 'etc', 'cni', 'net.d', '05-workloadnet.conflist');
    const conflist = JSON.parse(fs.readFileSync(conflistFile, 'utf8')) as CniConflist;
    expect(conflist.plugins.map((p) => p.type)).to.deep.equal(['workloadnet', 'portmap', 'bandwidth']);
    chain = new CniChain({
      conflist,
      binDir: path.join(view.root, 'opt', 'cni', 'bin'),
      nodeNetns: netnsPath(fx.node),
      // The forwarder's socket is a node path; the test's node is below view.root.
      rewrite: (p) =>
        typeof p.socket === 'string' ? { ...p, socket: nodePathOf(view, manifest.pod, daemon, p.socket) } : p,
    });
    const pod = await addPod({
      portMappings: [{ hostPort: HOST_PORT, containerPort: POD_PORT, protocol: 'tcp' }],
    });
    expect(pod.ip).to.match(/^10\.244\.37\./);
    await listeners.listen(outside.name, OUTSIDE_PORT, 'outside');
    expect(await tcpAsk(pod.ns.name, OUTSIDE_ADDRESS, OUTSIDE_PORT)).to.equal(`outside saw ${NODE_ADDRESS}`);
  });

  it('keeps the source address from pod to pod on the node', async () => {
    const [first] = pods;
    const second = await addPod();
    await listeners.listen(second.ns.name, POD_PORT, 'second');
    expect(await tcpAsk(first!.ns.name, second.ip, POD_PORT)).to.equal(`second saw ${first!.ip}`);
  });

  it("answers a pod's hostPort on the node's address, from outside the node", async () => {
    const [first] = pods;
    await listeners.listen(first!.ns.name, POD_PORT, 'first');
    expect(await tcpAsk(outside.name, NODE_ADDRESS, HOST_PORT)).to.equal(`first saw ${OUTSIDE_ADDRESS}`);
  });

  it("serves /metrics and /readyz on the node's address to another namespace (metricsListen 0.0.0.0:9472)", async () => {
    const port = daemon.ports?.find((p) => p.name === 'metrics')?.containerPort;
    expect(port).to.equal(9472);
    const ready = await httpGetIn(outside.name, `http://${NODE_ADDRESS}:${port}/readyz`);
    expect(ready.status).to.equal(200);
    const metrics = await httpGetIn(outside.name, `http://${NODE_ADDRESS}:${port}/metrics`);
    expect(metrics.status).to.equal(200);
    expect(metrics.body).to.match(/^workloadnet_/m);
  });

  it('removes the pods through the chain in reverse order, leaving no hostPort rule', async () => {
    const nat = (): string =>
      execFileSync('ip', ['netns', 'exec', fx.node, 'iptables-save', '-t', 'nat'], { encoding: 'utf8' });
    expect(nat(), 'the hostPort rule portmap wrote').to.include(`--dport ${HOST_PORT}`);
    for (const p of pods.splice(0)) await chain.del(p.call, p.addResult);
    expect(nat()).not.to.include(`--dport ${HOST_PORT}`);
    const ls = await podman(['exec', daemonName, 'workloadnet', 'ls', '--json']);
    expect(JSON.parse(ls.stdout)).to.deep.equal([]);
  });
});
