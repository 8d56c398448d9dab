import { expect } from 'chai';
import type { AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import type { DaemonProcess } from '../support/daemon-process';
import { attachRequest } from '../support/attach-request';
import { linuxHostLinks } from '../support/kernel-view';
import { describeRoot } from '../support/describe-root';
import { useNodeFixture } from '../support/node-fixture';
import { pings } from '../support/ping';

// SIGKILL the daemon in the middle of 50 concurrent attaches, restart it, and check after reconcile
// that the kernel and the store agree: no host link without a row, no row without its link, no address
// twice, and every surviving workload still passes traffic.

describeRoot('linux backend crash recovery (root, test-owned namespaces)', function () {
  this.timeout(120_000);
  const fx = useNodeFixture({ prefix: 'wnx-', dirPrefix: 'wn-crash-' });
  let daemon: DaemonProcess;

  const start = () => fx.startDaemon({ args: ['--pod-cidr', '10.253.0.0/24'] });

  it('recovers a consistent state after SIGKILL during 50 concurrent attaches', async () => {
    daemon = await start();
    const workloads = Array.from({ length: 50 }, (_, i) => ({ id: `crash-${i}`, ns: fx.namespaces.add() }));
    const client = daemon.client;
    const calls = workloads.map((w) =>
      client.call(client.raw.attach, attachRequest(w.id, w.ns.path)).then(
        (r: AttachResponse) => r,
        () => undefined,
      ),
    );
    // Kill once some, but not all, attaches have finished.
    const done: number[] = [];
    calls.forEach((p, i) => void p.then((r) => r && done.push(i)));
    for (let i = 0; i < 400 && done.length < 5; i++) await new Promise((r) => setTimeout(r, 5));
    await daemon.kill('SIGKILL');
    await Promise.all(calls);

    daemon = await start();
    const list = (await daemon.client.call(daemon.client.raw.list, {})).attachments;
    const status = await daemon.client.status();
    expect(status.reconcile, 'reconcile ran').to.not.equal(undefined);

    const hostLinks = await linuxHostLinks(fx.node);
    const aliases = hostLinks.map((l) => l.ifalias ?? '');
    const keys = list.map((a) => `${a.workloadId}/${a.ifName}`);
    // Every host link in our group belongs to a stored attachment, and every attachment has its link.
    for (const alias of aliases)
      expect(
        keys.some((k) => alias.endsWith(k)),
        `orphan host link ${alias}`,
      ).to.equal(true);
    for (const k of keys)
      expect(
        aliases.some((a) => a.endsWith(k)),
        `attachment ${k} without host link`,
      ).to.equal(true);
    expect(list.every((a) => a.state === 'ready')).to.equal(true);

    const addresses = list.map((a) => (a.result?.ips[0]?.cidr ?? '').split('/')[0]);
    expect(new Set(addresses).size, 'no address twice').to.equal(addresses.length);
    expect(status.pools[0]?.used).to.equal(list.length);

    // Survivors still pass traffic to each other.
    const survivors = list.slice(0, 3);
    for (const a of survivors) {
      const w = workloads.find((x) => x.id === a.workloadId);
      const peer = list.find((x) => x.workloadId !== a.workloadId);
      if (!w || !peer) continue;
      const to = (peer.result?.ips[0]?.cidr ?? '').split('/')[0] ?? '';
      expect(await pings(w.ns.name, to), `${w.id} reaches ${peer.workloadId}`).to.equal(true);
    }
    // Workloads whose attach was cut off can attach now.
    const missing = workloads.filter((w) => !list.some((a) => a.workloadId === w.id));
    for (const w of missing.slice(0, 5)) {
      const r = await daemon.client.call(daemon.client.raw.attach, attachRequest(w.id, w.ns.path));
      expect(r.ip).to.have.length(1);
    }
  });
});
