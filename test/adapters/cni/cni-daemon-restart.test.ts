import { expect } from 'chai';
import * as path from 'node:path';
import type { DaemonProcess } from '../../support/daemon-process';
import { describeRoot } from '../../support/describe-root';
import { useNodeFixture } from '../../support/node-fixture';
import { runShim } from '../../support/cni-harness';

// The real daemon (dist/cli/workloadnet.js) killed with SIGKILL and started again 1.5 s later: CNI calls
// a runtime makes in that window wait for it through the forwarder's retry and succeed, so a runtime
// never sees a restart. Linux backend, daemon inside a test-owned node namespace.

describeRoot('CNI calls across a daemon restart (real daemon, linux backend, root)', function () {
  this.timeout(90_000);
  const fx = useNodeFixture({ prefix: 'wnc-rs-', uplinkAddress: '10.250.7.1' });
  let daemon: DaemonProcess | undefined;
  const shim = path.resolve(__dirname, '..', '..', '..', 'bin', 'workloadnet-cni');

  const start = async (): Promise<DaemonProcess> =>
    fx.startDaemon({ dir: path.join(fx.dir, 'daemon'), args: ['--pod-cidr', '10.253.7.0/24'] });

  before(async () => {
    daemon = await start();
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') console.error(`--- daemon log ---\n${daemon?.log()}`);
  });

  function call(command: 'ADD' | 'DEL', id: string, netns: string) {
    const stdin = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'wnc-restart',
      type: 'workloadnet',
      socket: daemon?.cniSocket,
    });
    return runShim(
      shim,
      {
        CNI_COMMAND: command,
        CNI_CONTAINERID: id,
        CNI_NETNS: netns,
        CNI_IFNAME: 'eth0',
        CNI_PATH: '/opt/cni/bin',
        CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${id}`,
      },
      stdin,
    );
  }

  it('serves an ADD and a DEL issued while the daemon is dead, once it is back', async () => {
    const old = fx.namespaces.add();
    const added = await call('ADD', 'before-kill', old.path);
    expect(added.exitCode, added.stdout).to.equal(0);

    await daemon?.kill('SIGKILL');
    const fresh = fx.namespaces.add();
    // Both start while no daemon listens (the dead one's socket refuses), and retry.
    const pendingAdd = call('ADD', 'during-restart', fresh.path);
    const pendingDel = call('DEL', 'before-kill', old.path);
    await new Promise((r) => setTimeout(r, 1500));
    daemon = await start();

    const [add, del] = await Promise.all([pendingAdd, pendingDel]);
    expect(add.exitCode, add.stdout).to.equal(0);
    const result = JSON.parse(add.stdout) as { ips: { address: string }[] };
    expect(result.ips[0]?.address).to.match(/^10\.253\.7\.\d+\/32$/);
    expect(del.exitCode, del.stdout).to.equal(0);
    // Both were issued before the new daemon existed: they waited for it rather than failing.
    expect(Math.min(add.ms, del.ms)).to.be.at.least(1400);

    const c = daemon.client;
    const ids = (await c.call(c.raw.list, {})).attachments.map((a) => a.workloadId);
    expect(ids).to.include('during-restart').and.not.include('before-kill');

    const cleanup = await call('DEL', 'during-restart', fresh.path);
    expect(cleanup.exitCode, cleanup.stdout).to.equal(0);
  });
});
