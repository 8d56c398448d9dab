import { expect } from 'chai';
import type { AttachmentView, DataplaneResult, IpAssignment } from '../../../core/backend';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { ip, netnsInode } from '../../support/netns-fixture';
import { netnsPath } from '../../support/netns';
import { attachTo, testSpec, type TestSpec } from '../../support/attach-spec';
import { describeRoot } from '../../support/describe-root';
import { linuxBackendNode } from '../../support/linux-backend-node';
import { rejection } from '../../support/expect-error';
import { pings } from '../../support/ping';

// LinuxBackend.setMtu against the real kernel: a running pair gets another MTU in place — both ends,
// and the routes on the workload's end that carry an MTU — keeping its interfaces (ifindex), addresses
// and routes; a pair that is not the attachment's is refused and left as it is. A test-owned node
// namespace stands for the host; workloads get namespaces beside it.

const v4 = (address: string): IpAssignment => ({ family: 4, address, gateway: '169.254.1.1' });
const v6 = (address: string): IpAssignment => ({ family: 6, address, gateway: 'fe80::1' });

/** "index mtu" of an interface in a namespace. */
async function link(ns: string, dev: string): Promise<{ index: number; mtu: number; peer: number }> {
  const out = await ip('-n', ns, '-o', 'link', 'show', 'dev', dev);
  const m = /^(\d+): [^@:]+(?:@if(\d+))?: .* mtu (\d+) /.exec(out);
  return { index: Number(m?.[1]), peer: Number(m?.[2]), mtu: Number(m?.[3]) };
}

describeRoot('LinuxBackend.setMtu (real kernel)', function () {
  this.timeout(60_000);
  const kernel = linuxBackendNode({ prefix: 'wnm-', address: '10.251.0.1', backend: { ipv6: true } });

  async function attached(
    name: string,
    ips: IpAssignment[],
    mtu: number,
  ): Promise<{ ns: string; spec: TestSpec; view: AttachmentView }> {
    const ns = kernel.pool.add(name).name;
    const spec = testSpec(`${ns}-wl`, { path: netnsPath(ns), inode: netnsInode(ns) }, ips, { mtu });
    const dataplane: DataplaneResult = await attachTo(kernel.backend, spec);
    return { ns, spec, view: { ...spec, dataplane } };
  }

  async function setMtu(view: AttachmentView, mtu: number): Promise<void> {
    const netns = await NetnsHandle.open(view.netnsPath, { workload: true });
    try {
      await kernel.backend.setMtu(view, netns, mtu);
    } finally {
      netns.close();
    }
  }

  it('changes both ends and the routes that carry an MTU, in place; down and up again; twice is once', async () => {
    const { ns, view } = await attached('a', [v4('10.251.1.2'), v6('fd51::2')], 1450);
    const hostName = view.dataplane?.hostIfName as string;
    // Routes of the workload's with an MTU of their own: one at the interface's (it follows), one above
    // the new MTU (lowered), one set smaller on purpose (kept); and IPv6.
    await ip('-n', ns, 'route', 'add', '10.9.1.0/24', 'via', '169.254.1.1', 'dev', 'eth0', 'mtu', '1450');
    await ip('-n', ns, 'route', 'add', '10.9.2.0/24', 'via', '169.254.1.1', 'dev', 'eth0', 'mtu', '9000');
    await ip('-n', ns, 'route', 'add', '10.9.3.0/24', 'via', '169.254.1.1', 'dev', 'eth0', 'mtu', '1280');
    await ip('-n', ns, '-6', 'route', 'add', 'fd99::/64', 'via', 'fe80::1', 'dev', 'eth0', 'mtu', '1450');
    const before = await link(ns, 'eth0');
    const hostBefore = await link(kernel.node, hostName);
    expect([before.mtu, hostBefore.mtu]).to.deep.equal([1450, 1450]);

    await setMtu(view, 1350);
    const after = await link(ns, 'eth0');
    expect(after, 'the same interface, its MTU changed').to.deep.equal({ ...before, mtu: 1350 });
    expect(await link(kernel.node, hostName)).to.deep.equal({ ...hostBefore, mtu: 1350 });
    const routes = await ip('-n', ns, 'route', 'show', 'dev', 'eth0');
    expect(routes).to.match(/10\.9\.1\.0\/24 via 169\.254\.1\.1 .*mtu 1350/);
    expect(routes).to.match(/10\.9\.2\.0\/24 via 169\.254\.1\.1 .*mtu 1350/);
    expect(routes).to.match(/10\.9\.3\.0\/24 via 169\.254\.1\.1 .*mtu 1280/);
    expect(routes, 'ours keep no MTU of their own').to.match(/^default via 169\.254\.1\.1 proto static $/m);
    expect(await ip('-n', ns, '-6', 'route', 'show', 'fd99::/64')).to.match(/mtu 1350/);
    // Addresses and the default routes are all still there, and the workload still reaches the node.
    expect(await ip('-n', ns, 'addr', 'show', 'dev', 'eth0')).to.match(
      /10\.251\.1\.2\/32[\s\S]*fd51::2\/128/,
    );
    expect(await kernel.backend.check({ ...view, mtu: 1350 })).to.deep.equal([]);
    // Another MTU recorded is drift to a full check; a presence check looks for the interface only.
    expect((await kernel.backend.check({ ...view, mtu: 1400 })).map((d) => d.kind)).to.include('mtu-changed');
    expect(await kernel.backend.check({ ...view, mtu: 1400 }, 'presence')).to.deep.equal([]);
    expect(await pings(ns, '10.251.0.1')).to.equal(true);

    await setMtu(view, 1500);
    expect((await link(ns, 'eth0')).mtu).to.equal(1500);
    expect((await link(kernel.node, hostName)).mtu).to.equal(1500);
    expect(await ip('-n', ns, 'route', 'show', '10.9.1.0/24')).to.match(/mtu 1500/);
    await setMtu(view, 1500);
    expect(await kernel.backend.check({ ...view, mtu: 1500 })).to.deep.equal([]);
  });

  it('refuses an MTU below IPv6’s minimum on an interface with IPv6 addresses, changing nothing', async () => {
    const { ns, view } = await attached('b', [v4('10.251.2.2'), v6('fd51::3')], 1500);
    const err = await rejection(setMtu(view, 1200));
    expect(err.message).to.include("MTU 1200 is below IPv6's minimum (1280)");
    expect((await link(ns, 'eth0')).mtu).to.equal(1500);
    // IPv4 only: allowed.
    const four = await attached('c', [v4('10.251.3.2')], 1500);
    await setMtu(four.view, 1200);
    expect((await link(four.ns, 'eth0')).mtu).to.equal(1200);
  });

  it('refuses a pair that is not the attachment’s: a workload end of another pair, or a host end missing', async () => {
    const { ns, view } = await attached('d', [v4('10.251.4.2')], 1500);
    const other = await attached('e', [v4('10.251.5.2')], 1500);
    // The attachment's record names the other's host end: the workload's eth0 is not its peer.
    const wrong: AttachmentView = {
      ...view,
      dataplane: {
        ...(view.dataplane as DataplaneResult),
        details: { hostIfName: other.view.dataplane?.hostIfName as string },
      },
    };
    const err = await rejection(setMtu(wrong, 1400));
    expect(err.message).to.match(/is not labelled as this attachment's|is not the peer of/);
    expect((await link(ns, 'eth0')).mtu).to.equal(1500);
    expect((await link(other.ns, 'eth0')).mtu).to.equal(1500);
    const gone: AttachmentView = {
      ...view,
      dataplane: { ...(view.dataplane as DataplaneResult), details: { hostIfName: 'wnnosuch' } },
    };
    expect((await rejection(setMtu(gone, 1400))).message).to.include('host interface wnnosuch is missing');
  });
});
