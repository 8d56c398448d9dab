import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DEFAULT_CONFIG } from '../../core/config';
import type { AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import { DaemonProcess } from '../support/daemon-process';
import { addNodeUplink, ipJson, isRoot, NetnsSet } from '../support/netns';

// SIGKILL the daemon in the middle of 50 concurrent attaches, restart it, and check after reconcile
// that the kernel and the store agree: no host link without a row, no row without its link, no address
// twice, and every surviving workload still passes traffic.

const describeRoot = isRoot ? describe : describe.skip;
const GROUP = String(DEFAULT_CONFIG.linux.linkGroup);

describeRoot('linux backend crash recovery (root, test-owned namespaces)', function () {
  this.timeout(120_000);
  const namespaces = new NetnsSet('wnx-');
  let dir: string;
  let node: string;
  let daemon: DaemonProcess | undefined;

  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-crash-'));
    node = namespaces.add().name;
    addNodeUplink(node);
  });
  after(async () => {
    await daemon?.stop().catch(() => undefined);
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const start = () => DaemonProcess.start({ dir, netns: node, args: ['--pod-cidr', '10.253.0.0/24'] });

  it('recovers a consistent state after SIGKILL during 50 concurrent attaches', async () => {
    daemon = await start();
    const workloads = Array.from({ length: 50 }, (_, i) => ({ id: `crash-${i}`, ns: namespaces.add() }));
    const client = daemon.client;
    const calls = workloads.map((w) =>
      client
        .call(client.raw.attach, {
          workloadId: w.id,
          netns: { netnsPath: w.ns.path, ifName: 'eth0', mtu: 0 },
          containerId: '',
          pod: undefined,
          dns: undefined,
        })
        .then(
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
    const status = await daemon.client.call(daemon.client.raw.status, {});
    expect(status.reconcile, 'reconcile ran').to.not.equal(undefined);

    // ip -j prints an empty object for every link outside the group: keep the real ones.
    const hostLinks = ipJson<Array<{ ifname?: string; ifalias?: string }>>(node, [
      'link',
      'show',
      'group',
      GROUP,
    ]).filter((l) => l.ifname);
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
      execFileSync('ip', ['netns', 'exec', w.ns.name, 'ping', '-c', '1', '-W', '2', to], { stdio: 'ignore' });
    }
    // Workloads whose attach was cut off can attach now.
    const missing = workloads.filter((w) => !list.some((a) => a.workloadId === w.id));
    for (const w of missing.slice(0, 5)) {
      const r = await daemon.client.call(daemon.client.raw.attach, {
        workloadId: w.id,
        netns: { netnsPath: w.ns.path, ifName: 'eth0', mtu: 0 },
        containerId: '',
        pod: undefined,
        dns: undefined,
      });
      expect(r.ip).to.have.length(1);
    }
  });
});
