import { expect } from 'chai';
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess, daemonCommand, type DaemonProcessOptions } from '../support/daemon-process';
import { ipJson } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { useNodeFixture } from '../support/node-fixture';

// A second daemon on a node must refuse to run before it touches anything: its start-up reconcile
// would take the first daemon's links for orphans, and it would add a tunnel and tables of its own.
// On the same socket the socket guard sees it; with other sockets and another state directory (a
// leftover host service beside the DaemonSet) only the node lock does, whatever file system it sees.

describeRoot('a second daemon on the same node (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  const fx = useNodeFixture({ prefix: 'wn2-', dirPrefix: 'wn-second-', shape: 'loopback' });
  let daemon: DaemonProcess;
  let otherDir: string;

  before(async () => {
    daemon = await fx.startDaemon({ flags: { 'pod-cidr': '10.248.0.0/24' } });
    const w = fx.namespaces.add();
    await daemon.client.call(daemon.client.raw.attach, attachRequest('first', w.path));
    otherDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-second-other-'));
  });
  after(() => fs.rmSync(otherDir, { recursive: true, force: true }));

  const node = (): string => daemon.opts.netns ?? '';
  /** What the first daemon has programmed and recorded, to compare before and after a refusal. */
  const firstDaemonState = async (): Promise<unknown> => ({
    links: ipJson<Array<{ ifname?: string }>>(node(), ['link', 'show']).map((l) => l.ifname),
    routes: execFileSync('ip', ['-n', node(), 'route', 'show', 'table', 'all'], { encoding: 'utf8' }),
    rows: (await daemon.client.call(daemon.client.raw.list, {})).attachments.map((a) => a.workloadId),
  });
  /** Another daemon's options: its own sockets and state in `dir`, the first daemon's pool. */
  const other = (dir: string, more: Partial<DaemonProcessOptions> = {}): DaemonProcessOptions => ({
    dir,
    netns: node(),
    flags: { 'pod-cidr': '10.248.0.0/24' },
    ...more,
  });
  const run = (opts: DaemonProcessOptions): ReturnType<typeof spawnSync> => {
    const { file, args } = daemonCommand(opts);
    return spawnSync(file, args, { encoding: 'utf8', timeout: 20_000 });
  };

  it('exits with a clear message and leaves the running daemon’s attachments and links alone', async () => {
    const before = await firstDaemonState();
    // The same socket, state and pool as the first; only the CNI socket differs.
    const second = run({
      ...daemon.opts,
      flags: { ...daemon.opts.flags, 'cni-socket': path.join(fx.dir, 'cni2.sock') },
    });
    expect(second.status).to.equal(1);
    expect(second.stderr).to.match(/another daemon is already serving/);
    expect(await firstDaemonState()).to.deep.equal(before);
  });

  it('refuses a daemon with other sockets and state, naming the holder, from a mount namespace that sees none of its files', async () => {
    const before = await firstDaemonState();
    const dir = path.join(otherDir, 'hidden');
    // The first daemon's directory hidden under a tmpfs, as a container without that hostPath sees it.
    const second = run(
      other(dir, {
        wrap: [
          ...['unshare', '--mount', '--propagation', 'private', 'sh', '-c'],
          `mount -t tmpfs wn-other ${fx.dir} && exec "$@"`,
          'sh',
        ],
      }),
    );
    expect(second.status, String(second.stderr)).to.equal(1);
    expect(second.stderr).to.include("another daemon is already serving this node's network namespace");
    expect(second.stderr).to.include(`pid ${daemon.child.pid}`);
    expect(second.stderr).to.include(`API socket ${daemon.socket}`);
    expect(second.stderr).not.to.match(/root/);
    expect(await firstDaemonState()).to.deep.equal(before);
    // Refused before its store or its sockets existed.
    expect(fs.existsSync(path.join(dir, 'state'))).to.equal(false);
    expect(fs.existsSync(path.join(dir, 'api.sock'))).to.equal(false);
  });

  it('refuses a daemon serving the same namespace from another (--host-netns)', async () => {
    const before = await firstDaemonState();
    const dir = path.join(otherDir, 'beside');
    const second = run({
      ...other(dir),
      netns: undefined,
      flags: { 'pod-cidr': '10.248.0.0/24', 'host-netns': `/var/run/netns/${node()}` },
    });
    expect(second.status, String(second.stderr)).to.equal(1);
    expect(second.stderr).to.include(`pid ${daemon.child.pid}`);
    expect(await firstDaemonState()).to.deep.equal(before);
  });

  it('lets a new daemon start once the holder is killed (the kernel frees the lock)', async () => {
    await daemon.kill('SIGKILL');
    const next = await DaemonProcess.start(other(path.join(otherDir, 'next')));
    try {
      expect(next.child.exitCode).to.equal(null);
      expect(fs.readFileSync(next.logFile, 'utf8')).to.include('workloadnetd ready');
    } finally {
      await next.stop();
    }
  });
});
