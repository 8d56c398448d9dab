import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DaemonProcess } from '../support/daemon-process';
import { attachRequest } from '../support/attach-request';
import { NetnsSet, ipJson } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { makeNodeNamespace } from './node-namespace';
import { SimProcess, sleep } from '../support/sim-process';
import { waitUntil } from '../support/wait-until';

// SIGKILL of the daemon while a DPU Attach waits for a slow agent. Before: the row, written while the
// agent programmed, survived without the agent's answer; the next start took it for a live attachment
// whose port had gone missing and programmed it again (`repaired 1`): a live port and a held address
// for an Attach its caller was told failed. Now such a row is marked unfinished until the answer is
// recorded, and the next start removes it: no row, no address, no port on the agent, and no VF of
// ours left in the workload's namespace (the simulator plumbs real netdevs: its netns dataplane).

/** The agent's ack latency: the kill lands before, around and after it. */
const ACK_LATENCY_MS = 600;
const KILL_DELAYS_MS = [0, 40, 150, 300, 450, 580, 640, 900];

/** The links of a namespace other than its loopback. */
const linksIn = (netns: string): string[] =>
  ipJson<Array<{ ifname: string }>>(netns, ['link', 'show'])
    .map((l) => l.ifname)
    .filter((n) => n !== 'lo');

describeRoot('DPU attach cut short by SIGKILL (root, simulator process)', function () {
  this.timeout(180_000);
  const namespaces = new NetnsSet('wn-cut-');
  let dir: string;
  const daemons: DaemonProcess[] = [];
  let sim: SimProcess | undefined;

  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-cut-short-'))));
  afterEach(async () => {
    for (const d of daemons.splice(0)) await d.kill('SIGKILL').catch(() => undefined);
    await sim?.stop('SIGKILL').catch(() => undefined);
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('never brings back as live a port whose Attach the daemon was killed in, at any point of it', async () => {
    const node = makeNodeNamespace(namespaces);
    const dpu = namespaces.add().name;
    const agentSocket = path.join(dir, 'agent.sock');
    const args = ['--backend', 'dpu', '--agent-socket', agentSocket, '--pod-cidr', '10.244.17.0/24'];
    const opts = { dir, netns: node, args };
    const start = async (): Promise<DaemonProcess> => {
      const d = await DaemonProcess.start(opts);
      daemons.push(d);
      await waitUntil(async () => (await d.client.status()).ready, 'the daemon ready', 20_000, {
        intervalMs: 50,
      });
      return d;
    };
    sim = SimProcess.start({
      socket: agentSocket,
      agentId: 'cut-dpu',
      stateFile: path.join(dir, 'sim.json'),
      extra: [
        ...['--ack-latency-ms', String(ACK_LATENCY_MS)],
        ...['--dataplane', 'netns', '--dpu-netns', dpu, '--host-netns', `/var/run/netns/${node}`],
      ],
    });
    let daemon = await start();
    const answered = new Set<string>();
    const cutShort: string[] = [];
    const workloadNs = new Map<string, string>();
    for (const [i, delay] of KILL_DELAYS_MS.entries()) {
      const id = `cut-${i}`;
      const ns = namespaces.add();
      workloadNs.set(id, ns.name);
      let ok = false;
      const attaching = daemon.client.call(daemon.client.raw.attach, attachRequest(id, ns.path)).then(
        () => (ok = true),
        () => undefined,
      );
      await sleep(delay);
      await daemon.kill('SIGKILL');
      await attaching;
      if (ok) answered.add(id);
      else cutShort.push(id);
      daemon = await start();

      const st = await daemon.client.status();
      const report = `kill ${delay} ms into the attach of ${id}: ${JSON.stringify(st.reconcile)}`;
      expect(st.reconcile?.repaired, report).to.equal(0);
      // Its namespace lives: an attach removed is counted cut short, never released; an answered one
      // is not removed at all.
      expect(st.reconcile?.released, report).to.equal(0);
      expect(st.reconcile?.cutShort, report).to.be.at.most(ok ? 0 : 1);
      const listed = (await daemon.client.call(daemon.client.raw.list, {})).attachments.map(
        (a) => a.workloadId,
      );
      expect(listed.sort(), report).to.deep.equal([...answered].sort());
      const used = st.pools.reduce((n, p) => n + Number(p.used), 0);
      expect(used, `${report}: addresses held`).to.equal(answered.size);
      // The agent holds exactly the ports of the Attaches that were answered.
      await sim.waitForState(
        (s) =>
          s.synced &&
          s.ports
            .map((p) => p.name)
            .sort()
            .join() ===
            [...answered]
              .map((w) => `${w}/eth0`)
              .sort()
              .join(),
        `${report}: the agent holding the answered attaches' ports only`,
        5000,
      );
      // Each answered workload has its VF as eth0; one cut short has no VF of ours left behind.
      for (const [w, netns] of workloadNs)
        expect(linksIn(netns), `${report}: the links in ${w}'s namespace`).to.deep.equal(
          answered.has(w) ? ['eth0'] : [],
        );
    }
    expect(cutShort.length, 'kills that cut an attach short').to.be.at.least(4);

    // The runtime retries one that was cut short: it is attached afresh, and kept.
    const retried = cutShort[0]!;
    const ns = namespaces.add();
    const res = await daemon.client.call(daemon.client.raw.attach, attachRequest(retried, ns.path));
    expect(res.ip).to.have.length(1);
    await sim.waitForState(
      (s) => s.ports.some((p) => p.name === `${retried}/eth0`),
      'the retried port on the agent',
    );
  });
});
