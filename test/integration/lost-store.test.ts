import { expect } from 'chai';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import { DaemonProcess } from '../support/daemon-process';
import { attachRequest } from '../support/attach-request';
import { linuxHostLinks } from '../support/kernel-view';
import { describeRoot } from '../support/describe-root';
import { useNodeFixture } from '../support/node-fixture';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';

// The store is lost while workloads run (a wiped state directory): the daemon starts with a new, empty
// store beside a dataplane full of live workloads. It must not delete them as orphans nor hand their
// addresses out again: it adopts them, says so loudly, and Detach (as CNI DEL sends it, by workload id)
// still removes them.

describeRoot('a lost store beside running workloads (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  const fx = useNodeFixture({ prefix: 'wn-lost-', uplinkAddress: '10.254.9.1' });
  let daemon: DaemonProcess;

  const start = (): Promise<DaemonProcess> => fx.startDaemon({ args: ['--pod-cidr', '10.254.0.0/29'] });
  const attach = (d: DaemonProcess, id: string, netnsPath: string): Promise<AttachResponse> =>
    d.client.call(d.client.raw.attach, attachRequest(id, netnsPath));
  const hostLinks = async (): Promise<string[]> =>
    (await linuxHostLinks(fx.node)).map((l) => l.ifname).sort();
  const aliases = async (): Promise<string[]> =>
    (await linuxHostLinks(fx.node)).map((l) => l.ifalias).filter((a): a is string => a !== undefined);
  const addressOf = (r: AttachResponse): string => r.ips[0]?.cidr.split('/')[0] ?? '';

  it('adopts the running workloads instead of deleting them, and never hands their addresses out twice', async () => {
    daemon = await start();
    const w1 = fx.namespaces.add();
    const w2 = fx.namespaces.add();
    const r1 = await attach(daemon, 'lost-1', w1.path);
    const r2 = await attach(daemon, 'lost-2', w2.path);
    const linksBefore = await hostLinks();
    expect(linksBefore).to.have.length(2);
    await daemon.stop();

    fs.rmSync(path.join(fx.dir, 'state'), { recursive: true, force: true });
    daemon = await start();

    const status = await daemon.client.status();
    expect(status.reconcile?.adopted).to.equal(2);
    expect(status.reconcile?.orphansRemoved).to.equal(0);
    expect(status.reconcile?.warnings.join('\n')).to.match(
      /store .* is new, but the dataplane holds 2 workload/,
    );
    expect(fs.readFileSync(daemon.logFile, 'utf8')).to.match(/"level":50.*adopted them/);
    expect(await hostLinks(), 'no live workload lost its link').to.deep.equal(linksBefore);
    expect(await pings(w1.name, addressOf(r2)), 'the workloads still talk').to.equal(true);

    const list = (await daemon.client.call(daemon.client.raw.list, {})).attachments;
    expect(list.map((a) => a.workloadId).sort()).to.deep.equal(['lost-1', 'lost-2']);
    const adoptedAddresses = list.flatMap((a) => a.result?.ips.map((i) => i.cidr) ?? []).sort();
    expect(adoptedAddresses).to.deep.equal([r1.ips[0]?.cidr, r2.ips[0]?.cidr].sort());

    // The /29 has five addresses to hand out; two are held by the adopted workloads.
    const fresh = await Promise.all(
      [3, 4, 5].map(async (i) => addressOf(await attach(daemon, `fresh-${i}`, fx.namespaces.add().path))),
    );
    expect(fresh).to.not.include(addressOf(r1));
    expect(fresh).to.not.include(addressOf(r2));

    // Detach by workload id, as a CNI DEL does, removes an adopted workload's host link.
    await daemon.client.call(daemon.client.raw.detach, {
      workloadId: 'lost-1',
      netns: { netnsPath: '', ifName: '', mtu: 0 },
    });
    expect(await aliases()).to.not.include('workloadnet:lost-1/eth0');
    expect(await aliases()).to.include('workloadnet:lost-2/eth0');
    expect(await hostLinks()).to.have.length(linksBefore.length - 1 + fresh.length);

    // The store is no longer new: the next start trusts it, and the adopted workload is healthy.
    await daemon.stop();
    daemon = await start();
    const again = await daemon.client.status();
    expect(again.reconcile?.adopted).to.equal(0);
    expect(again.reconcile?.orphansRemoved).to.equal(0);
    expect(again.reconcile?.healthy).to.equal(1 + fresh.length);
  });
});

// The same loss, with the first start on the new store killed part-way. Before: the store wrote its
// identity when it opened and adoption then wrote one row per transaction, so a start killed after the
// identity and before the last row left a store that the next start trusted: it removed every link not
// yet adopted as an orphan (155 of them in the field, nothing at warn) and handed their addresses out
// again. Now the store stays new until the rows and "reconciled" commit together.
describeRoot('a lost store whose first start is killed part-way (root, test-owned namespaces)', function () {
  this.timeout(300_000);
  const fx = useNodeFixture({ prefix: 'wn-lostk-', uplinkAddress: '10.254.10.1' });
  const WORKLOADS = 40;
  const args = ['--pod-cidr', '10.254.32.0/26'];
  const hostLinks = async (): Promise<string[]> =>
    (await linuxHostLinks(fx.node)).map((l) => `${l.ifname} ${l.ifalias ?? ''}`).sort();

  it('never removes a live link, wherever the start is killed, and the first start that finishes adopts them all', async () => {
    const daemon = await fx.startDaemon({ args });
    const attached = new Map<string, string>();
    for (let i = 0; i < WORKLOADS; i++) {
      const r = await daemon.client.call(
        daemon.client.raw.attach,
        attachRequest(`killed-${i}`, fx.namespaces.add().path),
      );
      attached.set(`killed-${i}`, r.ips[0]?.cidr ?? '');
    }
    const linksBefore = await hostLinks();
    expect(linksBefore).to.have.length(WORKLOADS);
    await daemon.kill('SIGKILL');
    fs.rmSync(path.join(fx.dir, 'state'), { recursive: true, force: true });

    // Kill each start a little later after its backend is ready (the store opens right after) than
    // the one before, until one got as far as the end of its reconcile before the kill: every point
    // in between is covered at the machine's own pace.
    const logFile = path.join(fx.dir, 'daemon.log');
    const killedAt: number[] = [];
    for (let delayMs = 0; ; delayMs = Math.round(delayMs * 1.2) + 2) {
      expect(delayMs, 'a start reached the end of its reconcile').to.be.below(20_000);
      const logStart = fs.statSync(logFile).size;
      const startLog = (): string => fs.readFileSync(logFile, 'utf8').slice(logStart);
      const d = DaemonProcess.launch({ dir: fx.dir, netns: fx.node, args });
      await waitUntil(() => startLog().includes('linux backend ready'), 'the backend', 20_000, {
        intervalMs: 1,
      });
      await new Promise((r) => setTimeout(r, delayMs));
      await d.kill('SIGKILL');
      killedAt.push(delayMs);
      expect(await hostLinks(), `links after a start killed ${delayMs} ms in`).to.deep.equal(linksBefore);
      if (startLog().includes('reconcile finished')) break;
    }
    expect(killedAt.length, 'starts killed before their reconcile finished').to.be.above(1);

    const final = await fx.startDaemon({ args });
    const status = await final.client.status();
    expect(status.reconcile?.orphansRemoved).to.equal(0);
    expect(await hostLinks()).to.deep.equal(linksBefore);
    const list = (await final.client.call(final.client.raw.list, {})).attachments;
    const held = new Map(list.map((a) => [a.workloadId, a.result?.ips[0]?.cidr ?? '']));
    expect(held, 'every workload recorded with its address').to.deep.equal(attached);
    // None of their addresses is handed out again.
    const fresh = await final.client.call(
      final.client.raw.attach,
      attachRequest('fresh', fx.namespaces.add().path),
    );
    expect([...attached.values()]).to.not.include(fresh.ips[0]?.cidr);
  });
});
