import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { DaemonProcess } from '../support/daemon-process';
import { attachRequest } from '../support/attach-request';
import { linuxHostLinks } from '../support/kernel-view';
import { ipJson } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { NodeFixture } from '../support/node-fixture';

// The state directory on a 1 MiB tmpfs that fills up. Before: the first Attach that needed the store
// to grow ended the daemon (an unhandled "Commit failed"), the caller saw "Connection dropped" and
// Status still said ready. Now the Attach fails with RESOURCE_EXHAUSTED naming the store, it is rolled
// back (no link, no row, its address free), Status says not ready and why, and once there is room
// again the daemon notices by itself and attaches work.

/**
 * A node fixture whose directory holds a 1 MiB tmpfs, mounted before the suite's tests and unmounted
 * after them. The daemon holds the store open on the tmpfs: it is stopped before the unmount, and the
 * unmount comes before the directory is removed.
 */
function withTmpfsNode(dirPrefix: string): { fx: NodeFixture; mnt: () => string } {
  const fx = new NodeFixture({ prefix: 'wn-harden-', dirPrefix });
  let mnt = '';
  before(() => {
    fx.setUp();
    mnt = path.join(fx.dir, 'tmpfs');
    fs.mkdirSync(mnt);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mnt]);
  });
  after(async () => {
    await fx.daemon?.stop().catch(() => undefined);
    execFileSync('umount', [mnt]);
    await fx.cleanup();
  });
  return { fx, mnt: () => mnt };
}

describeRoot('a full state disk (root, test-owned namespaces, 1 MiB tmpfs)', function () {
  this.timeout(120_000);
  const { fx, mnt: tmpfs } = withTmpfsNode('wn-harden-full-');
  let mnt: string;
  let daemon: DaemonProcess;
  before(() => (mnt = tmpfs()));

  const attach = (id: string, netnsPath: string) =>
    daemon.client.call(daemon.client.raw.attach, attachRequest(id, netnsPath));
  const hostLinks = async (): Promise<string[]> =>
    (await linuxHostLinks(fx.node)).map((l) => l.ifalias ?? '');

  async function waitForReady(ready: boolean): Promise<string[]> {
    for (let i = 0; i < 100; i++) {
      const st = await daemon.client.status();
      if (st.ready === ready) return st.reasons;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`Status never became ${ready ? 'ready' : 'not ready'}`);
  }

  it('fails the Attach with RESOURCE_EXHAUSTED, lives, says not ready, and recovers by itself', async () => {
    const stateDir = path.join(mnt, 'state');
    daemon = await fx.startDaemon({ args: ['--pod-cidr', '10.252.0.0/24', '--state-dir', stateDir] });
    const first = fx.namespaces.add();
    await attach('full-ok', first.path);

    // Fill the filesystem to the last byte.
    const filler = path.join(mnt, 'filler');
    const fd = fs.openSync(filler, 'w');
    const chunk = Buffer.alloc(4096, 1);
    try {
      for (;;) fs.writeSync(fd, chunk);
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).to.equal('ENOSPC');
    } finally {
      fs.closeSync(fd);
    }

    // lmdb reuses freed pages, so a write may still fit; sooner or later one needs the file to grow.
    const workloads: Array<{ id: string; ns: { name: string; path: string } }> = [];
    let failure: ServiceError | undefined;
    let attached = 1;
    for (let i = 0; i < 30 && !failure; i++) {
      const w = { id: `full-${i}`, ns: fx.namespaces.add() };
      workloads.push(w);
      try {
        await attach(w.id, w.ns.path);
        attached++;
      } catch (err) {
        failure = err as ServiceError;
      }
    }
    expect(failure, 'an attach on the full disk failed').to.not.equal(undefined);
    const failed = workloads[workloads.length - 1]!;
    expect(failure!.code, failure!.details).to.equal(grpcStatus.RESOURCE_EXHAUSTED);
    expect(failure!.details).to.include(path.join(stateDir, 'workloadnet.mdb')).and.match(/full/);

    // The daemon lives and says why it is not ready.
    const reasons = await waitForReady(false);
    expect(reasons.join())
      .to.include(stateDir)
      .and.match(/writes failing since/);

    // The failed attach was rolled back: no host link, no interface in the workload, no row, and the
    // address is not held (the pool counts only the attached ones).
    const links = await hostLinks();
    expect(
      links.some((a) => a.endsWith(`${failed.id}/eth0`)),
      'host link of the failed attach',
    ).to.equal(false);
    expect(links).to.have.length(attached);
    const inWorkload = ipJson<Array<{ ifname?: string }>>(failed.ns.name, ['link', 'show']).map(
      (l) => l.ifname,
    );
    expect(inWorkload).to.not.include('eth0');
    const list = (await daemon.client.call(daemon.client.raw.list, {})).attachments;
    expect(list.map((a) => a.workloadId)).to.not.include(failed.id);
    const st = await daemon.client.status();
    expect(st.pools[0]?.used).to.equal(attached);

    // Room again: the daemon's probe notices without any call, and the same workload attaches.
    fs.unlinkSync(filler);
    await waitForReady(true);
    const again = await attach(failed.id, failed.ns.path);
    expect(again.ip).to.have.length(1);
    expect(await hostLinks()).to.have.length(attached + 1);
    expect(daemon.child.exitCode, 'the daemon is still running').to.equal(null);
  });
});

// The first start on a full state disk. Before: LMDB created its lock file and data file with
// ftruncate and wrote through the map; the first page the full filesystem could not back ended the
// daemon with SIGBUS (exit 135) right after "linux backend ready", with nothing about the disk, and a
// service manager restarted it into the same crash. Now it refuses in words and exits 1.
describeRoot('a first start on a full state disk (root, test-owned namespaces, 1 MiB tmpfs)', function () {
  this.timeout(60_000);
  const { fx, mnt: tmpfs } = withTmpfsNode('wn-harden-first-full-');
  let mnt: string;
  before(() => (mnt = tmpfs()));

  it('refuses to start, naming the directory and ENOSPC, with exit 1 and no signal; starts once there is room', async () => {
    const stateDir = path.join(mnt, 'state');
    const filler = path.join(mnt, 'filler');
    const fd = fs.openSync(filler, 'w');
    try {
      for (;;) fs.writeSync(fd, Buffer.alloc(4096, 1));
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).to.equal('ENOSPC');
    } finally {
      fs.closeSync(fd);
    }

    const args = ['--pod-cidr', '10.252.1.0/24', '--state-dir', stateDir];
    const daemon = DaemonProcess.launch({ dir: fx.dir, netns: fx.node, args });
    const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>(
      (resolve) => daemon.child.once('exit', (c, s) => resolve({ code: c, signal: s })),
    );
    daemon.client.close();
    const log = fs.readFileSync(daemon.logFile, 'utf8');
    expect(signal, log).to.equal(null);
    expect(code, log).to.equal(1);
    expect(log).to.include(`cannot create the state store in ${stateDir}`).and.include('ENOSPC');
    expect(log).to.match(/free space there/);

    fs.unlinkSync(filler);
    const started = await fx.startDaemon({ args });
    const st = await started.client.status();
    expect(st.ready, st.reasons.join()).to.equal(true);
  });
});
