import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ipJson } from '../support/netns';
import { useNodeFixture } from '../support/node-fixture';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { runShim } from '../support/cni-harness';
import { buildImage, imageSkipReason, type Built } from './image-build';
import {
  container,
  httpProbe,
  nodePathOf,
  podman,
  podmanRun,
  readManifest,
  ROOT,
  type NodeView,
  type ProbeKind,
} from './daemonset-podman';

// The image `npm run image` builds (packaging/image/build.sh), run with podman as the DaemonSet of
// packaging/kubernetes/workloadnet.yaml runs it: the init container installs the forwarder and the
// conflist into the node's CNI directories (test directories here), the daemon container runs on the
// node network (a test-owned namespace) with the manifest's capabilities and mounts and becomes ready
// by the manifest's own readiness probe, and a pod namespace made after it started is attached and
// detached through the installed forwarder, reading the installed conflist, as a runtime would.

const why = imageSkipReason();
const describeIf = why === '' ? describe : describe.skip;

const sha256 = (file: string): string =>
  execFileSync('sha256sum', [file], { encoding: 'utf8' }).split(' ')[0] ?? '';

describeIf(`OCI image run as the DaemonSet runs it (podman, test-owned node namespace)${why}`, function () {
  // A first build makes the Debian root file system (mmdebstrap, a few minutes); later ones reuse it.
  this.timeout(25 * 60_000);
  const fx = useNodeFixture({ prefix: 'wn-img-', uplinkAddress: '10.250.31.1' });
  const manifest = readManifest();
  const daemonName = `wn-img-daemon-${process.pid}`;
  let built: Built;
  let view: NodeView;

  before(async () => {
    built = await buildImage(path.join(fx.dir, 'rootfs.tar'));
    view = {
      root: path.join(fx.dir, 'node'),
      configDir: path.join(fx.dir, 'config'),
      netns: fx.node,
      nodeName: 'test-node',
    };
    // The ConfigMap's config, with the change a node outside a cluster needs (static pools) and a
    // leak sweep every second rather than every minute.
    const config = JSON.parse(manifest.configJson) as Record<string, unknown>;
    config.poolSource = 'static';
    config.podCidrs = ['10.251.31.0/24'];
    config.sweepIntervalMs = 1000;
    fs.mkdirSync(view.configDir, { recursive: true });
    fs.writeFileSync(path.join(view.configDir, 'config.json'), JSON.stringify(config));
    // A Kubernetes node has IPv4 forwarding on (kubeadm checks it); the unprivileged daemon cannot
    // turn it on by itself.
    execFileSync('ip', ['netns', 'exec', fx.node, 'sh', '-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward']);
  });

  after(async () => {
    await podman(['rm', '--force', '--time', '15', daemonName]);
  });

  afterEach(async function () {
    if (this.currentTest?.state === 'failed') {
      const logs = await podman(['logs', '--tail', '40', daemonName]);
      console.error(
        `--- daemon container log ---\n${logs.stdout}${logs.stderr}\n--- build ---\n${built?.log ?? ''}`,
      );
    }
  });

  /** The daemon container, started as the manifest says, or with some of its mounts left out. */
  async function startDaemon(without: string[] = []): Promise<void> {
    const daemon = container(manifest.pod, 'workloadnet');
    const c = { ...daemon, volumeMounts: daemon.volumeMounts?.filter((m) => !without.includes(m.mountPath)) };
    const run = await podmanRun(view, manifest.pod, c, built.image, daemonName);
    expect(run.code, run.stderr).to.equal(0);
  }
  async function stopDaemon(): Promise<void> {
    const grace = String(manifest.pod.terminationGracePeriodSeconds ?? 30);
    expect((await podman(['stop', '--time', grace, daemonName])).code).to.equal(0);
    expect((await podman(['rm', daemonName])).code).to.equal(0);
  }
  const exec = (cmd: string[]) => podman(['exec', daemonName, ...cmd]);
  /** A probe of the manifest's daemon container as kubelet makes it (the status code; 0: no answer). */
  const probe = (which: ProbeKind): Promise<number> =>
    httpProbe(view, container(manifest.pod, 'workloadnet'), which);
  const readiness = 'readinessProbe' as const;
  const listed = async (): Promise<string[]> =>
    (JSON.parse((await exec(['workloadnet', 'ls', '--json'])).stdout) as Array<{ workloadId: string }>).map(
      (a) => a.workloadId,
    );
  const hostLinks = (): Array<{ ifname: string; group?: string | number }> =>
    ipJson<Array<{ ifname: string; group?: string | number }>>(fx.node, ['link', 'show']).filter(
      (l) => String(l.group) === '30574',
    );

  /** `node ARGS` run in a container of the image (no mounts of the manifest's containers). */
  const imageNode = (args: string[]) =>
    podmanRun(view, manifest.pod, { name: 'node', command: ['node'], args }, built.image);

  const cniCall = { conf: '', env: {} as Record<string, string>, bin: '', ip: '', pod: '' };

  it('is built by one command, under 225 MiB, its layer the sorted tar the build wrote, Node.js 24', async () => {
    expect(built.image).to.match(/^localhost\/workloadnet:\d+\.\d+\.\d+-[0-9a-f]{12}$/);
    const inspect = await podman([
      'image',
      'inspect',
      '--format',
      '{{json .RootFS.Layers}} {{.Size}}',
      built.image,
    ]);
    expect(inspect.code, inspect.stderr).to.equal(0);
    const [layers, size] = inspect.stdout.trim().split(' ');
    expect(JSON.parse(layers ?? '[]')).to.deep.equal([`sha256:${built.layer}`]);
    expect(sha256(path.join(fx.dir, 'rootfs.tar'))).to.equal(built.layer);
    // About 220 MiB: Node.js 24 is 104 of them (stripped), the reference plugins portmap and bandwidth
    // and the iptables they need 13.
    expect(Number(size)).to.be.below(225 * 1024 * 1024);
    const node = await imageNode(['--version']);
    expect(node.stdout.trim()).to.equal(
      `v${fs.readFileSync(path.join(ROOT, 'packaging', 'image', 'node-version'), 'utf8').trim()}`,
    );
    expect(node.stdout).to.match(/^v24\./);
  });

  it("loads lmdb, msgpackr-extract and koffi on the image's Node.js, from the native builds the image keeps", async () => {
    // What the daemon does with them: a store in lmdb (whose msgpackr loads msgpackr-extract) and a
    // libc call through koffi. The build keeps each package's build for this Node's ABI or its N-API
    // build; Node 24 has no ABI build of lmdb or msgpackr-extract, so their N-API builds must load.
    const code = `
      const from = { paths: ['/opt/workloadnet'] };
      const lmdb = require(require.resolve('lmdb', from));
      const koffi = require(require.resolve('koffi', from));
      const db = lmdb.open({ path: require('fs').mkdtempSync('/tmp/store-') });
      db.putSync('k', { a: 1 });
      const getpid = koffi.load('libc.so.6').func('int getpid()');
      process.stdout.write(JSON.stringify({
        abi: process.versions.modules,
        got: db.get('k'),
        pid: getpid() === process.pid,
        addons: Object.keys(require.cache).filter((f) => f.endsWith('.node')).sort(),
      }));`;
    const run = await imageNode(['-e', code]);
    expect(run.code, run.stderr).to.equal(0);
    const r = JSON.parse(run.stdout) as { abi: string; got: unknown; pid: boolean; addons: string[] };
    expect(r.got).to.deep.equal({ a: 1 });
    expect(r.pid, 'getpid through koffi').to.equal(true);
    const build = `node\\.(napi|abi${r.abi})\\.glibc\\.node`;
    const modules = '^/opt/workloadnet/node_modules/';
    expect(r.addons).to.have.length(3);
    expect(r.addons[0]).to.match(new RegExp(`${modules}@lmdb/lmdb-linux-x64/${build}$`));
    expect(r.addons[1]).to.match(
      new RegExp(`${modules}@msgpackr-extract/msgpackr-extract-linux-x64/${build}$`),
    );
    expect(r.addons[2]).to.match(new RegExp(`${modules}koffi/build/koffi/linux_x64/koffi\\.node$`));
  });

  it('is reproducible: a second build from the same inputs writes the same layer and reuses the image', async () => {
    const again = await buildImage(path.join(fx.dir, 'rootfs-again.tar'));
    expect(again.layer).to.equal(built.layer);
    expect(again.image).to.equal(built.image);
    expect(again.log).to.include('is already in the store');
    expect(sha256(path.join(fx.dir, 'rootfs-again.tar'))).to.equal(built.layer);
  });

  it('installs the forwarder and the conflist into the node CNI directories (the init container)', async () => {
    const init = container(manifest.pod, 'install-cni');
    const run = await podmanRun(view, manifest.pod, init, built.image);
    expect(run.code, run.stderr).to.equal(0);
    const bin = path.join(view.root, 'opt', 'cni', 'bin', 'workloadnet');
    const conflist = path.join(view.root, 'etc', 'cni', 'net.d', '05-workloadnet.conflist');
    expect(
      fs.readFileSync(bin).equals(fs.readFileSync(path.join(ROOT, 'dist', 'bin', 'workloadnet-cni'))),
    ).to.equal(true);
    expect(fs.statSync(bin).mode & 0o777).to.equal(0o755);
    const list = JSON.parse(fs.readFileSync(conflist, 'utf8')) as {
      plugins: Array<{ type: string; socket: string }>;
    };
    expect(list.plugins[0]).to.include({ type: 'workloadnet', socket: '/run/workloadnet/cni.sock' });
    // Installing again (a restarted pod) is allowed: the files are workloadnet's own.
    const again = await podmanRun(view, manifest.pod, init, built.image);
    expect(again.code, again.stderr).to.equal(0);
  });

  it('runs the daemon, which becomes ready by the manifest readiness probe', async () => {
    const daemon = container(manifest.pod, 'workloadnet');
    await startDaemon();
    await waitUntil(async () => (await probe(readiness)) === 200, 'the readiness probe to pass', 120_000, {
      intervalMs: 500,
    });
    expect(await probe('livenessProbe')).to.equal(200);
    expect(await probe('startupProbe')).to.equal(200);
    // Its sockets and store are on the node, where the manifest puts them.
    for (const f of [
      '/run/workloadnet/workloadnet.sock',
      '/run/workloadnet/cni.sock',
      '/var/lib/workloadnet',
    ]) {
      expect(fs.existsSync(nodePathOf(view, manifest.pod, daemon, f)), f).to.equal(true);
    }
  });

  it('attaches a pod made after it started through the installed forwarder and conflist', async () => {
    const daemon = container(manifest.pod, 'workloadnet');
    const pod = fx.namespaces.add();
    // What libcni sends: the plugin's entry of the installed conflist with cniVersion and name. The
    // socket it names is a path on the node; the test's node is below view.root.
    const list = JSON.parse(
      fs.readFileSync(path.join(view.root, 'etc', 'cni', 'net.d', '05-workloadnet.conflist'), 'utf8'),
    ) as { cniVersion: string; name: string; plugins: Array<{ socket: string }> };
    const entry = list.plugins[0] ?? { socket: '' };
    cniCall.conf = JSON.stringify({
      ...entry,
      cniVersion: list.cniVersion,
      name: list.name,
      socket: nodePathOf(view, manifest.pod, daemon, entry.socket),
    });
    cniCall.bin = path.join(view.root, 'opt', 'cni', 'bin');
    cniCall.env = {
      CNI_CONTAINERID: 'img-pod-1',
      CNI_NETNS: pod.path,
      CNI_IFNAME: 'eth0',
      CNI_PATH: cniCall.bin,
    };
    cniCall.pod = pod.name;
    const add = await runShim(
      path.join(cniCall.bin, 'workloadnet'),
      { ...cniCall.env, CNI_COMMAND: 'ADD' },
      cniCall.conf,
    );
    expect(add.exitCode, add.stdout + add.stderr).to.equal(0);
    const result = JSON.parse(add.stdout) as { ips: Array<{ address: string }> };
    cniCall.ip = result.ips[0]?.address.split('/')[0] ?? '';
    expect(cniCall.ip).to.match(/^10\.251\.31\./);
    const addrs = ipJson<Array<{ addr_info: Array<{ local: string }> }>>(pod.name, ['addr', 'show', 'eth0']);
    expect(addrs[0]?.addr_info.map((a) => a.local)).to.include(cniCall.ip);
    expect(await pings(fx.node, cniCall.ip, { count: 3, waitSeconds: 2 })).to.equal(true);
    expect(await pings(pod.name, '10.250.31.1', { count: 3, waitSeconds: 2 })).to.equal(true);
    expect(await listed()).to.deep.equal(['img-pod-1']);
    expect(hostLinks()).to.have.length(1);
  });

  it('started again without the netns mount, sees no pod namespace and releases nothing (the sweep holds)', async () => {
    await stopDaemon();
    await startDaemon(['/var/run/netns']);
    await waitUntil(
      async () => {
        const st = await exec(['workloadnet', 'status', '--json']);
        // While the daemon starts, `status --json` prints an error object without reasons.
        const reasons =
          st.stdout === '' ? undefined : (JSON.parse(st.stdout) as { reasons?: string[] }).reasons;
        return reasons?.some((r) => r.includes('leak sweep held')) ?? false;
      },
      'Status to say the leak sweep holds',
      120_000,
      { intervalMs: 500 },
    );
    // Not ready, so the rollout would stop here; still alive, so it is not restarted in a loop.
    expect(await probe(readiness)).to.equal(503);
    expect(await probe('livenessProbe')).to.equal(200);
    expect(await listed()).to.deep.equal(['img-pod-1']);
    expect(hostLinks()).to.have.length(1);
    expect(await pings(fx.node, cniCall.ip, { count: 3, waitSeconds: 2 })).to.equal(true);
  });

  it('started again as the manifest says, detaches the pod through the forwarder, leaving nothing', async () => {
    await stopDaemon();
    await startDaemon();
    await waitUntil(async () => (await probe(readiness)) === 200, 'the readiness probe to pass', 120_000, {
      intervalMs: 500,
    });
    const del = await runShim(
      path.join(cniCall.bin, 'workloadnet'),
      { ...cniCall.env, CNI_COMMAND: 'DEL' },
      cniCall.conf,
    );
    expect(del.exitCode, del.stdout + del.stderr).to.equal(0);
    expect(await listed()).to.deep.equal([]);
    expect(hostLinks(), 'host ends left behind').to.deep.equal([]);
  });

  it('stops on SIGTERM within the grace period the manifest gives it', async () => {
    const grace = manifest.pod.terminationGracePeriodSeconds ?? 30;
    const stop = await podman(['stop', '--time', String(grace), daemonName]);
    expect(stop.code, stop.stderr).to.equal(0);
    const state = await podman(['inspect', '--format', '{{.State.ExitCode}}', daemonName]);
    expect(state.stdout.trim(), 'exit code 0: a drained shutdown, not a kill').to.equal('0');
  });
});
