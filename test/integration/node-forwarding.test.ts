import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { EGRESS_TABLE } from '../../backends/linux/egress-masquerade';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { NetnsSet, type TestNamespace } from '../support/netns';
import { waitUntil } from '../support/wait-until';
import { StandInKubeApiServer } from '../support/standin-kube-apiserver';

// Forwarding on a node as a DaemonSet pod meets it: ranges from the Node (the stand-in API server),
// /proc/sys read-only for the daemon (an unprivileged container), the node's IPv6 forwarding off. The
// daemon runs beside the stand-in (it reaches it on loopback) in a mount namespace of its own where
// /proc/sys is remounted read-only, and programs a test-owned node namespace (--host-netns).

const IPV4 = 'net.ipv4.ip_forward';
const IPV6 = 'net.ipv6.conf.all.forwarding';

/**
 * The daemon with /proc/sys read-only, exec'd in place (the child pid stays the daemon's). Its mounts
 * follow the host's (as a hostPath with HostToContainer propagation does), so pods' namespaces made
 * later are seen.
 */
const READ_ONLY_PROC_SYS = [
  'unshare',
  '--mount',
  '--propagation',
  'slave',
  'sh',
  '-c',
  'mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec "$@"',
  'sh',
];

describeRoot('IP forwarding on a node (root, test-owned namespaces, stand-in API server)', function () {
  this.timeout(90_000);
  const namespaces = new NetnsSet('wnfw-');
  const daemons: DaemonProcess[] = [];
  let root: string;
  let api: StandInKubeApiServer;

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-forwarding-'));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
  });

  after(async () => {
    for (const d of daemons) await d.stop().catch(() => undefined);
    namespaces.cleanup();
    await api?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  const sysctl = (node: TestNamespace, name: string): string =>
    execFileSync('ip', ['netns', 'exec', node.name, 'sysctl', '-n', name], { encoding: 'utf8' }).trim();
  const setSysctl = (node: TestNamespace, name: string, value: string): void =>
    void execFileSync('ip', ['netns', 'exec', node.name, 'sysctl', '-qw', `${name}=${value}`]);

  const networkUnavailable = (name: string) =>
    api.node(name)?.status?.conditions?.find((c) => c.type === 'NetworkUnavailable');

  /** A node namespace with these forwarding values, its Node with `ranges`, its daemon started. */
  async function node(
    name: string,
    ranges: string[],
    forwarding: { v4: string; v6: string },
    readOnly: boolean,
  ): Promise<{ ns: TestNamespace; daemon: DaemonProcess }> {
    const ns = namespaces.add(name);
    execFileSync('ip', ['-n', ns.name, 'link', 'set', 'lo', 'up']);
    setSysctl(ns, IPV4, forwarding.v4);
    setSysctl(ns, IPV6, forwarding.v6);
    api.setNode(name, ranges);
    // As a cloud's node controller makes a Node: tainted network-unavailable until the plugin runs.
    api.setConditions(name, [
      { type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated' },
      { type: 'Ready', status: 'True', reason: 'KubeletReady' },
    ]);
    const daemon = await DaemonProcess.start({
      dir: path.join(root, name),
      flags: {
        'pool-source': 'kubernetes',
        kubeconfig: api.kubeconfig(),
        'node-name': name,
        'host-netns': ns.path,
        fabric: 'off',
      },
      ...(readOnly ? { wrap: READ_ONLY_PROC_SYS } : {}),
    });
    daemons.push(daemon);
    return { ns, daemon };
  }

  it('becomes ready on an IPv4-only Node with IPv6 forwarding off and /proc/sys read-only, touching neither', async () => {
    const { ns, daemon } = await node('fw-ro-v4', ['10.241.1.0/24'], { v4: '1', v6: '0' }, true);
    await waitUntil(async () => (await daemon.client.status()).ready, 'the daemon to be ready', 20_000, {
      intervalMs: 100,
    });
    const pod = namespaces.add('pod');
    const res = await daemon.client.call(daemon.client.raw.attach, attachRequest('ro-pod', pod.path));
    expect(res.ips.map((ip) => ip.cidr)).to.have.length(1);
    expect(res.ips[0]?.cidr).to.match(/^10\.241\.1\.\d+\/32$/);
    expect([sysctl(ns, IPV4), sysctl(ns, IPV6)]).to.deep.equal(['1', '0']);
    expect(daemon.child.exitCode).to.equal(null);
  });

  it('stays up but not ready while IPv4 forwarding is off and cannot be set, saying how to set it', async () => {
    const { ns, daemon } = await node('fw-ro-off', ['10.241.2.0/24'], { v4: '0', v6: '0' }, true);
    const reason = async (): Promise<string | undefined> =>
      (await daemon.client.status()).reasons.find((r) => r.includes(IPV4));
    await waitUntil(async () => (await reason()) !== undefined, `Status to name ${IPV4}`, 20_000, {
      intervalMs: 100,
    });
    const st = await daemon.client.status();
    expect(st.ready).to.equal(false);
    const text = (await reason()) ?? '';
    expect(text).to.include(`${IPV4} is 0 in ${ns.path}`);
    expect(text).to.include('read-only');
    expect(text).to.include(`sysctl -w ${IPV4}=1`);
    expect(text).to.include('init container');
    expect(st.reasons.join('\n')).not.to.match(/root/);
    expect(daemon.log()).to.include(`${IPV4} is 0`);
    expect(daemon.child.exitCode).to.equal(null);
    expect(networkUnavailable('fw-ro-off')?.status, 'the Node stays network-unavailable meanwhile').to.equal(
      'True',
    );
    // Set on the node (as an init container would): ready without a restart.
    setSysctl(ns, IPV4, '1');
    await waitUntil(async () => (await daemon.client.status()).ready, 'ready once it is set', 10_000, {
      intervalMs: 100,
    });
    // Ready: the Node's NetworkUnavailable condition is cleared (the taint goes), the kubelet's kept.
    await waitUntil(
      () => networkUnavailable('fw-ro-off')?.status === 'False',
      'the condition cleared',
      10_000,
    );
    expect(networkUnavailable('fw-ro-off')?.reason).to.equal('WorkloadnetIsUp');
    expect(api.node('fw-ro-off')?.status?.conditions?.find((c) => c.type === 'Ready')?.status).to.equal(
      'True',
    );
  });

  it("masquerades its Node's pod range only, not the configured podCidrs the Kubernetes source replaces", async () => {
    const { ns } = await node('fw-egress', ['10.241.5.0/24'], { v4: '1', v6: '0' }, false);
    const table = (): string => {
      try {
        return execFileSync('ip', ['netns', 'exec', ns.name, 'nft', 'list', 'table', 'inet', EGRESS_TABLE], {
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'ignore'],
        });
      } catch {
        return '';
      }
    };
    await waitUntil(() => table().includes('10.241.5.0/24'), 'the Node range in the egress table', 20_000, {
      intervalMs: 100,
    });
    // 10.88.0.0/16 is the default podCidrs (podman's own network): neither ours to masquerade nor a
    // cluster range whose traffic keeps its source.
    expect(table()).to.not.include('10.88.0.0/16');
  });

  it('turns IPv6 forwarding on only when its Node gets an IPv6 range', async () => {
    const { ns, daemon } = await node('fw-rw-late', ['10.241.3.0/24'], { v4: '1', v6: '0' }, false);
    await waitUntil(async () => (await daemon.client.status()).ready, 'the daemon to be ready', 20_000, {
      intervalMs: 100,
    });
    expect(sysctl(ns, IPV6)).to.equal('0');
    api.setNode('fw-rw-late', ['10.241.3.0/24', 'fd00:241:3::/64']);
    await waitUntil(() => sysctl(ns, IPV6) === '1', `${IPV6} to be turned on`, 10_000, { intervalMs: 100 });
    expect((await daemon.client.status()).ready).to.equal(true);
  });

  it('names IPv6 forwarding when an IPv6 range arrives and it cannot be set', async () => {
    const { daemon } = await node('fw-ro-late', ['10.241.4.0/24'], { v4: '1', v6: '0' }, true);
    await waitUntil(async () => (await daemon.client.status()).ready, 'the daemon to be ready', 20_000, {
      intervalMs: 100,
    });
    api.setNode('fw-ro-late', ['10.241.4.0/24', 'fd00:241:4::/64']);
    await waitUntil(
      async () => (await daemon.client.status()).reasons.some((r) => r.includes(`${IPV6} is 0`)),
      `Status to name ${IPV6}`,
      10_000,
      { intervalMs: 100 },
    );
    expect(daemon.child.exitCode).to.equal(null);
  });
});
