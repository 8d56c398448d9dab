import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { attachRequest } from '../support/attach-request';
import { daemonCommand, type DaemonProcess } from '../support/daemon-process';
import { ipJson } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { useNodeFixture } from '../support/node-fixture';

// A second daemon started on the same socket must refuse to run before it touches anything: its
// start-up reconcile would otherwise take the first daemon's links for orphans.

describeRoot('a second daemon on the same socket (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  const fx = useNodeFixture({ prefix: 'wn2-', dirPrefix: 'wn-second-', shape: 'loopback' });
  let daemon: DaemonProcess;

  before(async () => {
    daemon = await fx.startDaemon({ flags: { 'pod-cidr': '10.248.0.0/24' } });
  });

  it('exits with a clear message and leaves the running daemon’s attachments and links alone', async () => {
    const w = fx.namespaces.add();
    await daemon.client.call(daemon.client.raw.attach, attachRequest('first', w.path));
    const node = daemon.opts.netns ?? '';
    const linksBefore = ipJson<Array<{ ifname?: string }>>(node, ['link', 'show']).map((l) => l.ifname);
    // The same socket, state and pool as the first; only the CNI socket differs.
    const { file, args } = daemonCommand({
      ...daemon.opts,
      flags: { ...daemon.opts.flags, 'cni-socket': path.join(fx.dir, 'cni2.sock') },
    });
    const second = spawnSync(file, args, { encoding: 'utf8', timeout: 20_000 });
    expect(second.status).to.equal(1);
    expect(second.stderr).to.match(/another daemon is already serving/);
    expect(ipJson<Array<{ ifname?: string }>>(node, ['link', 'show']).map((l) => l.ifname)).to.deep.equal(
      linksBefore,
    );
    const list = await daemon.client.call(daemon.client.raw.list, {});
    expect(list.attachments.map((a) => a.workloadId)).to.deep.equal(['first']);
  });
});
