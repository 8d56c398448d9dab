import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DaemonProcess } from '../support/daemon-process';
import { attachRequest, detachRequest } from '../support/attach-request';
import { NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { makeNodeNamespace } from './node-namespace';
import { SimProcess } from '../support/sim-process';
import { waitUntil } from '../support/wait-until';
import { journalOf } from '../../backends/dpu-sim/state-file';

// A daemon on a new store (its state directory wiped) asks its agents to keep the ports it does not
// list, since they may belong to workloads whose state was lost. Before: it asked so for its whole
// life, so a Delete the agent acked and then lost (a DPU resuming an older copy of its state) left the
// port live for good while its address went to the next workload. Now the doubt ends with the store's
// first full sync with that agent, recorded in the store: from the agent's next snapshot on, what the
// store does not list is removed.

describeRoot('DPU agent adoption by a new store (root, simulator process)', function () {
  this.timeout(60_000);
  const namespaces = new NetnsSet('wn-adopt-');
  let dir: string;
  let daemon: DaemonProcess | undefined;
  let sim: SimProcess | undefined;

  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-adopt-'))));
  afterEach(async () => {
    await daemon?.kill('SIGKILL').catch(() => undefined);
    await sim?.stop('SIGKILL').catch(() => undefined);
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('prunes a port whose Delete the agent acked and lost, once the new store has synced with it', async () => {
    const node = makeNodeNamespace(namespaces);
    const agentSocket = path.join(dir, 'agent.sock');
    const stateFile = path.join(dir, 'sim.json');
    const simOpts = { socket: agentSocket, agentId: 'adopt-dpu', bootId: 'adopt-boot-1', stateFile };
    const args = ['--backend', 'dpu', '--agent-socket', agentSocket, '--pod-cidr', '10.244.18.0/24'];
    daemon = await DaemonProcess.start({ dir, netns: node, args });
    sim = SimProcess.start(simOpts);
    const d = daemon;
    await waitUntil(async () => (await d.client.status()).ready, 'the daemon ready', 20_000, {
      intervalMs: 50,
    });
    await sim.waitForState((s) => s.synced, 'the first snapshot applied');

    const ns = namespaces.add();
    await d.client.call(d.client.raw.attach, attachRequest('lost-delete', ns.path));
    await sim.waitForState((s) => s.ports.some((p) => p.name === 'lost-delete/eth0'), 'the port');
    // The DPU's memory as it is now, with the port: what it will wrongly resume.
    const copy = path.join(dir, 'sim-before-delete.json');
    fs.copyFileSync(stateFile, copy);
    const journal = fs.existsSync(journalOf(stateFile));
    if (journal) fs.copyFileSync(journalOf(stateFile), journalOf(copy));

    await d.client.call(d.client.raw.detach, detachRequest('lost-delete', ns.path));
    await sim.waitForState((s) => s.ports.length === 0, 'the Delete acked and applied');
    await sim.stop('SIGKILL');
    fs.copyFileSync(copy, stateFile);
    if (journal) fs.copyFileSync(journalOf(copy), journalOf(stateFile));
    else fs.rmSync(journalOf(stateFile), { force: true });

    // The same boot comes back with the port the daemon deleted.
    sim = SimProcess.start(simOpts);
    const resumed = await sim.waitForState(() => true, 'the agent resumed');
    expect(resumed.ports.map((p) => p.name)).to.include('lost-delete/eth0');
    await sim.waitForState(
      (s) => s.synced && s.session.state === 'connected' && s.ports.length === 0,
      'the port the store does not list removed by the snapshot',
      5000,
    );
    const st = await d.client.status();
    expect(st.attachments).to.equal(0);
  });
});
