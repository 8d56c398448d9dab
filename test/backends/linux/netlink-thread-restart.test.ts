import { expect } from 'chai';
import type { Worker } from 'node:worker_threads';
import type { NetlinkThread } from '../../../backends/linux/netlink-thread';
import type { RestartingReader } from '../../../backends/linux/restarting-reader';
import { netnsInode } from '../../support/netns-fixture';
import { netnsPath } from '../../support/netns';
import { attachTo, testSpec } from '../../support/attach-spec';
import { describeRoot } from '../../support/describe-root';
import { linuxBackendNode } from '../../support/linux-backend-node';
import { pings } from '../../support/ping';
import { waitUntil } from '../../support/wait-until';

// The Linux backend's netlink thread ending by itself (a crash, an uncaught error) must not leave
// every later attach on the slower threadpool path for the daemon's life: a new thread is started.
// The thread is ended from here, as a failure would end it.

describeRoot('LinuxBackend: a netlink thread that dies is started again (real kernel)', function () {
  this.timeout(60_000);
  const kernel = linuxBackendNode({ prefix: 'wnr-', address: '10.250.0.1' });

  /** The backend's running thread (private: a failure is what would end it). */
  async function thread(): Promise<NetlinkThread | undefined> {
    const host = await (
      kernel.backend as unknown as { host: Promise<{ thread?: RestartingReader<NetlinkThread> }> }
    ).host;
    const held = host.thread as unknown as { current?: NetlinkThread } | NetlinkThread | undefined;
    // Before the keeper, the host context held the thread itself.
    const t = held && 'current' in held ? held.current : (held as NetlinkThread | undefined);
    return t?.alive ? t : undefined;
  }
  const worker = (t: NetlinkThread): Worker => (t as unknown as { worker: Worker }).worker;

  it('runs attaches on a new thread after the old one ended', async () => {
    const dying = await thread();
    expect(dying, 'a thread at start').to.not.equal(undefined);
    await worker(dying as NetlinkThread).terminate();
    await waitUntil(
      async () => (await thread()) !== undefined && (await thread()) !== dying,
      'a new netlink thread',
      3_000,
      { intervalMs: 20 },
    );
    const ns = kernel.pool.add('pod').name;
    const spec = testSpec('wl-after-restart', { path: netnsPath(ns), inode: netnsInode(ns) }, [
      { family: 4, address: '10.250.1.5', gateway: '169.254.1.1' },
    ]);
    await attachTo(kernel.backend, spec);
    expect(await pings(ns, '10.250.0.1', { count: 1, waitSeconds: 2 })).to.equal(true);
  });
});
