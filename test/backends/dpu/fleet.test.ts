import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import type { DataplaneResult } from '../../../core/backend';
import type { DpuBackend } from '../../../backends/dpu';
import { decodeDetails } from '../../../backends/dpu/details';
import { Toggle, VfLinkState } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { expectCode, removeDir, scratchDir, spec, view } from '../../support/dpu-fixtures';
import { simRig } from '../../support/sim-rig';
import { SimProcess, waitUntil } from '../../support/sim-process';
import { attachTo } from '../../support/attach-spec';
import { attachRequest, detachRequest } from '../../support/attach-request';
import { CLI, DaemonProcess } from '../../support/daemon-process';
import { codeName, outcome } from '../../support/grpc-outcome';
import { NetnsSet } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';

// Several DPUs on one node: two real simulator processes serve one backend. Placement, a DPU that goes
// away and comes back, and what the node reports meanwhile, observed from both ends (the backend's
// results and health, each simulator's state file).

describe('DPU fleet: two simulators serving one backend', function () {
  this.timeout(30_000);
  let backend: DpuBackend | undefined;
  const rig = simRig();

  const connected = (s: SimProcess): Promise<unknown> =>
    s.waitForState((st) => st.session.state === 'connected' && st.synced, 'connected and synced');

  const portsOf = (s: SimProcess): string[] => (s.state()?.ports ?? []).map((p) => p.name).sort();
  const agentOf = (r: DataplaneResult): string | undefined => decodeDetails(r)?.agentId;

  async function twoAgents(aExtra: string[] = [], bExtra: string[] = []): Promise<[SimProcess, SimProcess]> {
    backend = await rig.startBackend();
    const a = rig.sim('dpu-a', aExtra, 'boot-a1');
    const b = rig.sim('dpu-b', bExtra, 'boot-b1');
    await Promise.all([connected(a), connected(b)]);
    return [a, b];
  }

  it('holds a session per agent and is ready with both, reporting each', async () => {
    await twoAgents();
    const h = await backend!.health();
    expect(h.ready, h.reasons.join('; ')).to.equal(true);
    expect(h.details).to.include({ agents: 2, agentsHealthy: 2 });
    expect(h.details).to.not.have.property('agentsAway');
  });

  it('places each new port on the agent with the most free VFs, ties by id, then refuses when all are full', async () => {
    const [a, b] = await twoAgents(['--max-ports', '4'], ['--max-ports', '2']);
    const placed: Array<string | undefined> = [];
    for (let i = 1; i <= 6; i++) placed.push(agentOf(await attachTo(backend!, spec(i))));
    // Free (a, b): 4,2 → a; 3,2 → a; 2,2 → a (id); 1,2 → b; 1,1 → a (id); 0,1 → b.
    expect(placed).to.deep.equal(['dpu-a', 'dpu-a', 'dpu-a', 'dpu-b', 'dpu-a', 'dpu-b']);
    await a.waitForState((s) => s.ports.length === 4, 'four ports on a');
    await b.waitForState((s) => s.ports.length === 2, 'two ports on b');
    expect(portsOf(a)).to.deep.equal(['w1/eth0', 'w2/eth0', 'w3/eth0', 'w5/eth0']);

    const err = await expectCode(attachTo(backend!, spec(7)), 'RESOURCE_EXHAUSTED');
    expect(err.message).to.match(/every healthy DPU agent is full \(dpu-a: 4\/4, dpu-b: 2\/2\)/);
    // Nothing left behind: neither agent got the port, and the backend does not hold it.
    expect((await backend!.health()).details?.ports).to.equal(6);
    expect(portsOf(a)).to.not.include('w7/eth0');
    expect(portsOf(b)).to.not.include('w7/eth0');
  });

  it('places a port on the agent the caller names, and refuses an unknown or full one cleanly', async () => {
    const [a, b] = await twoAgents(['--max-ports', '8'], ['--max-ports', '1']);
    const r = await attachTo(backend!, spec(1, { dpu: 'dpu-b' }));
    expect(agentOf(r)).to.equal('dpu-b');
    await b.waitForState((s) => s.ports.length === 1, 'the port on b');
    expect(portsOf(a)).to.deep.equal([]);

    const full = await expectCode(attachTo(backend!, spec(2, { dpu: 'dpu-b' })), 'RESOURCE_EXHAUSTED');
    expect(full.message).to.match(/DPU agent dpu-b holds its maximum of 1 ports/);
    const unknown = await expectCode(attachTo(backend!, spec(3, { dpu: 'dpu-z' })), 'UNAVAILABLE');
    expect(unknown.message).to.match(/DPU agent dpu-z is not connected/);
    expect((await backend!.health()).details?.ports).to.equal(1);
    expect(portsOf(a)).to.deep.equal([]);
  });

  it('stays ready when one DPU dies: its ports are degraded, new ports go to the other until it is full, then a clean error', async () => {
    const [a, b] = await twoAgents(['--max-ports', '8'], ['--max-ports', '2']);
    const onA = await attachTo(backend!, spec(1));
    const onB = await attachTo(backend!, spec(2, { dpu: 'dpu-b' }));
    expect([agentOf(onA), agentOf(onB)]).to.deep.equal(['dpu-a', 'dpu-b']);
    await a.stop('SIGKILL');
    await waitUntil(async () => (await backend!.health()).details?.agentsHealthy === 1, 'the loss noticed');

    const h = await backend!.health();
    expect(h.ready, h.reasons.join('; ')).to.equal(true);
    expect(h.details).to.include({ agentsAway: 'dpu-a', agentsHealthy: 1 });
    expect(h.reasons.join(' ')).to.match(/DPU agent dpu-a disconnected/);
    expect(backend!.attachmentState(view(spec(1), onA))).to.equal('degraded');
    expect(backend!.attachmentState(view(spec(2), onB))).to.equal('ready');
    const drift = await backend!.check(view(spec(1), onA));
    expect(drift.map((d) => d.kind)).to.include('dpu-down');

    // The port on the dead DPU never moves: repairing it waits for its own agent.
    await expectCode(attachTo(backend!, spec(1)), 'UNAVAILABLE');
    const named = await expectCode(attachTo(backend!, spec(5, { dpu: 'dpu-a' })), 'UNAVAILABLE');
    expect(named.message).to.match(/DPU agent dpu-a disconnected/);
    expect(agentOf(await attachTo(backend!, spec(3)))).to.equal('dpu-b');
    const err = await expectCode(attachTo(backend!, spec(4)), 'RESOURCE_EXHAUSTED');
    expect(err.message).to.match(/DPU agent dpu-b holds its maximum of 2 ports/);
    await b.waitForState((s) => s.ports.length === 2, 'two ports on b');
    expect(portsOf(b)).to.deep.equal(['w2/eth0', 'w3/eth0']);

    await b.stop('SIGKILL');
    await waitUntil(async () => !(await backend!.health()).ready, 'no agent left');
    const none = await expectCode(attachTo(backend!, spec(6)), 'UNAVAILABLE');
    expect(none.message).to.match(/no DPU agent is healthy.*dpu-a.*dpu-b/);
  });

  it('lets Detach succeed while the DPU is down, and the agent drops the port in its next snapshot', async () => {
    const [a] = await twoAgents();
    const r1 = await attachTo(backend!, spec(1, { dpu: 'dpu-a' }));
    await attachTo(backend!, spec(2, { dpu: 'dpu-a' }));
    await a.waitForState((s) => s.ports.length === 2, 'two ports on a');
    await a.stop('SIGKILL');
    await waitUntil(async () => (await backend!.health()).details?.agentsHealthy === 1, 'the loss noticed');
    await backend!.detach(view(spec(1), r1));
    // Back with the same boot: it kept both ports, and the snapshot takes w1 away.
    const again = rig.sim('dpu-a', [], 'boot-a1');
    const st = await again.waitForState((s) => s.synced && s.ports.length === 1, 'w1 dropped');
    expect(st.ports.map((p) => p.name)).to.deep.equal(['w2/eth0']);
  });

  it('sends the dead agent back with a new boot exactly its ports, at their generations', async () => {
    const [a, b] = await twoAgents();
    const mine: DataplaneResult[] = [];
    for (const i of [1, 2, 3]) mine.push(await attachTo(backend!, spec(i, { dpu: 'dpu-a' })));
    await attachTo(backend!, spec(4, { dpu: 'dpu-b' }));
    await attachTo(backend!, spec(5, { dpu: 'dpu-b' }));
    await a.stop('SIGKILL');
    await waitUntil(async () => (await backend!.health()).details?.agentsHealthy === 1, 'the loss noticed');

    const reborn = rig.sim('dpu-a', [], 'boot-a2');
    const st = await reborn.waitForState((s) => s.synced && s.ports.length === 3, 'three ports back');
    expect(st.bootId).to.equal('boot-a2');
    expect(st.ports.map((p) => [p.name, p.generation])).to.deep.equal(
      mine.map((r, i) => [`w${i + 1}/eth0`, r.details?.dpuGeneration]),
    );
    expect(portsOf(b)).to.deep.equal(['w4/eth0', 'w5/eth0']);
    expect(backend!.attachmentState(view(spec(1), mine[0]))).to.equal('ready');
    const h = await backend!.health();
    expect(h.details).to.include({ agents: 2, agentsHealthy: 2 });
  });

  it('sizes placement by the VF pools the inventories report, and hands out real VFs', async () => {
    const [a, b] = await twoAgents(['--pfs', '2', '--vfs-per-pf', '2'], ['--pfs', '1', '--vfs-per-pf', '1']);
    const sa = await a.waitForState((s) => (s.inventoriesSent ?? 0) >= 1, 'an inventory sent');
    expect(sa.protocolVersion).to.equal(4);
    expect(sa.inventory?.pfs.map((pf) => [pf.index, pf.vfTotal, pf.vfFree])).to.deep.equal([
      [0, 2, 2],
      [1, 2, 2],
    ]);
    const placed: DataplaneResult[] = [];
    for (let i = 1; i <= 5; i++) placed.push(await attachTo(backend!, spec(i)));
    // Free (a, b): 4,1 → a; 3,1 → a; 2,1 → a; 1,1 → a (id); 0,1 → b.
    expect(placed.map(agentOf)).to.deep.equal(['dpu-a', 'dpu-a', 'dpu-a', 'dpu-a', 'dpu-b']);
    const err = await expectCode(attachTo(backend!, spec(6)), 'RESOURCE_EXHAUSTED');
    expect(err.message).to.match(/dpu-a: 4\/4, dpu-b: 1\/1/);
    const st = await a.waitForState(
      (s) => s.ports.length === 4 && s.inventory?.pfs.every((pf) => pf.vfFree === 0) === true,
      'a full pool, reported',
    );
    // Each port holds its own VF, lowest free first.
    expect(st.ports.map((p) => [p.name, p.vf?.pf, p.vf?.vf])).to.deep.equal([
      ['w1/eth0', 0, 0],
      ['w2/eth0', 0, 1],
      ['w3/eth0', 1, 0],
      ['w4/eth0', 1, 1],
    ]);
    expect(b.state()?.ports.map((p) => p.vf)).to.deep.equal([{ pf: 0, vf: 0 }]);
    // A VF comes back to the pool with its port, and goes to the next one.
    await backend!.detach(view(spec(2), placed[1]));
    await a.waitForState((s) => s.inventory?.pfs[0]?.vfFree === 1, 'the VF back in the inventory');
    expect(agentOf(await attachTo(backend!, spec(7)))).to.equal('dpu-a');
    const again = await a.waitForState((s) => s.ports.some((p) => p.name === 'w7/eth0'), 'w7 on a');
    expect(again.ports.find((p) => p.name === 'w7/eth0')?.vf).to.deep.equal({ pf: 0, vf: 1 });
  });

  it('speaks version 1 with an agent that offers only that, with no inventory', async () => {
    backend = await rig.startBackend();
    const old = rig.sim('dpu-old', ['--protocol', '1', '--pfs', '1', '--vfs-per-pf', '2']);
    await connected(old);
    const st = old.state();
    expect(st?.protocolVersion).to.equal(1);
    expect(st?.inventoriesSent ?? 0).to.equal(0);
    // Its capacity comes from max_ports in its hello (the pool's size), as before version 2.
    await attachTo(backend, spec(1));
    await attachTo(backend, spec(2));
    await expectCode(attachTo(backend, spec(3)), 'RESOURCE_EXHAUSTED');
  });

  it('sends VF settings to an agent that advertises them, and keeps them across a daemon restart', async () => {
    backend = await rig.startBackend();
    const a = rig.sim('dpu-a', ['--pfs', '2', '--vfs-per-pf', '4'], 'boot-a1');
    await connected(a);
    const dpuPort = {
      maxTxRateMbps: 100,
      minTxRateMbps: 10,
      spoofCheck: true,
      trust: false,
      linkState: 'enable' as const,
      pf: 1,
    };
    const r = await attachTo(backend, spec(1, { dpuPort }));
    expect(JSON.parse(String(r.details?.dpuPortOptions))).to.deep.equal(dpuPort);
    const st = await a.waitForState((s) => s.ports.length === 1, 'the port');
    expect(st.ports[0]?.qos).to.deep.equal({
      maxTxRateMbps: 100,
      minTxRateMbps: 10,
      spoofCheck: Toggle.TOGGLE_ON,
      trust: Toggle.TOGGLE_OFF,
      linkState: VfLinkState.VF_LINK_STATE_ENABLE,
    });
    expect(st.ports[0]?.vf).to.deep.equal({ pf: 1, vf: 0 });

    await backend.stop();
    backend = await rig.startBackend({}, false);
    await backend.reconcile([view(spec(1), r)], { storeIsNew: false });
    const again = await a.waitForState(
      (s) => s.synced && s.session.state === 'connected' && s.session.sessionId !== st.session.sessionId,
      'the snapshot of the restarted daemon',
    );
    expect(again.ports[0]?.qos?.maxTxRateMbps).to.equal(100);
    expect(again.ports[0]?.pf).to.equal(1);
  });

  it('refuses VF settings the agent does not advertise, or a PF it lacks, before sending anything', async () => {
    backend = await rig.startBackend();
    const a = rig.sim('dpu-a', [
      '--without-features',
      'qos-rate,pf-select',
      '--pfs',
      '2',
      '--vfs-per-pf',
      '2',
    ]);
    const old = rig.sim('dpu-old', ['--protocol', '1']);
    await Promise.all([connected(a), connected(old)]);
    const rate = await expectCode(
      attachTo(backend, spec(1, { dpu: 'dpu-a', dpuPort: { maxTxRateMbps: 50 } })),
      'INVALID_ARGUMENT',
    );
    expect(rate.message).to.match(
      /dpu-a does not support transmit rate limits \(it does not advertise "qos-rate"\)/,
    );
    const pf = await expectCode(
      attachTo(backend, spec(2, { dpu: 'dpu-a', dpuPort: { pf: 0 } })),
      'INVALID_ARGUMENT',
    );
    expect(pf.message).to.match(/"pf-select"/);
    const v1 = await expectCode(
      attachTo(backend, spec(3, { dpu: 'dpu-old', dpuPort: { trust: true } })),
      'INVALID_ARGUMENT',
    );
    expect(v1.message).to.match(
      /speaks protocol version 1, which carries no VF settings, but w3\/eth0 asks for VF trust/,
    );
    // What the agent does advertise goes through.
    await attachTo(backend, spec(4, { dpu: 'dpu-a', dpuPort: { spoofCheck: false } }));

    const full = rig.sim('dpu-b', ['--pfs', '2', '--vfs-per-pf', '1']);
    await connected(full);
    const noPf = await expectCode(
      attachTo(backend, spec(5, { dpu: 'dpu-b', dpuPort: { pf: 3 } })),
      'INVALID_ARGUMENT',
    );
    expect(noPf.message).to.match(/dpu-b has no PF 3 \(its PFs: 0 s[0-9a-f]{4}f0, 1 s[0-9a-f]{4}f1\)/);
    expect((await backend.health()).details?.ports).to.equal(1);
    await a.waitForState((s) => s.ports.length === 1, 'only w4 on a');
    expect(old.state()?.ports).to.deep.equal([]);
    expect(full.state()?.ports).to.deep.equal([]);
  });

  it('places a port with VF settings only on an agent that can apply them', async () => {
    const [a, b] = await twoAgents(
      ['--without-features', 'qos-rate', '--pfs', '2', '--vfs-per-pf', '8'],
      ['--pfs', '1', '--vfs-per-pf', '2'],
    );
    // dpu-a has far more room, but no rate limits: the rated port goes to dpu-b, the plain one to a.
    expect(agentOf(await attachTo(backend!, spec(1, { dpuPort: { maxTxRateMbps: 10 } })))).to.equal('dpu-b');
    expect(agentOf(await attachTo(backend!, spec(2)))).to.equal('dpu-a');
    await b.stop('SIGKILL');
    await waitUntil(async () => (await backend!.health()).details?.agentsHealthy === 1, 'the loss noticed');
    const err = await expectCode(
      attachTo(backend!, spec(3, { dpuPort: { maxTxRateMbps: 10 } })),
      'INVALID_ARGUMENT',
    );
    expect(err.message).to.match(
      /no healthy DPU agent supports what w3\/eth0 asks for \(transmit rate limits\); agents: dpu-a/,
    );
    await a.waitForState((s) => s.ports.length === 1, 'only w2 on a');
  });

  it('restores each port to its own agent after a daemon restart, and sends each agent only its ports', async () => {
    const [a, b] = await twoAgents();
    const r1 = await attachTo(backend!, spec(1, { dpu: 'dpu-a' }));
    const r2 = await attachTo(backend!, spec(2, { dpu: 'dpu-b' }));
    await backend!.stop();
    backend = await rig.startBackend({}, false);
    await backend.reconcile([view(spec(1), r1), view(spec(2), r2)], { storeIsNew: false });
    await Promise.all([
      a.waitForState((s) => s.synced && s.session.state === 'connected', 'a back'),
      b.waitForState((s) => s.synced && s.session.state === 'connected', 'b back'),
    ]);
    await waitUntil(async () => (await backend!.health()).details?.agentsHealthy === 2, 'both agents');
    expect(portsOf(a)).to.deep.equal(['w1/eth0']);
    expect(portsOf(b)).to.deep.equal(['w2/eth0']);
    // A repair of w2 (as the core does for a missing port) stays on dpu-b whatever the request says.
    expect(agentOf(await attachTo(backend!, spec(2, { dpu: 'dpu-a' }), r2))).to.equal('dpu-b');
  });

  it("prunes an adopted agent's port the store does not list while keeping an unadopted agent's, both at start-up", async () => {
    const [a, b] = await twoAgents();
    await attachTo(backend!, spec(1, { dpu: 'dpu-a' }));
    await attachTo(backend!, spec(2, { dpu: 'dpu-b' }));
    await a.waitForState((s) => s.ports.length === 1, 'w1 held by a');
    await b.waitForState((s) => s.ports.length === 1, 'w2 held by b');
    await backend!.stop();
    // The store had its first full sync with dpu-a only (dpu-b was away then), and lists neither port:
    // w1's Delete was acked by dpu-a and lost with a state it resumed; w2 may be a workload's whose
    // state the store never had.
    const recorded: string[] = [];
    const adoption = {
      keepsUnlisted: (id: string) => id !== 'dpu-a',
      record: (id: string) => Promise.resolve(void recorded.push(id)),
    };
    backend = await rig.startBackend({}, false);
    await waitUntil(async () => (await backend!.health()).details?.agentsHealthy === 2, 'both agents back');
    await backend.reconcile([], { storeIsNew: false, adoption });
    await Promise.all([
      a.waitForState((s) => s.synced && s.ports.length === 0, "a's unlisted port pruned"),
      b.waitForState((s) => s.synced && s.session.state === 'connected', 'b synced'),
    ]);
    expect(portsOf(b), "b's unlisted port kept").to.deep.equal(['w2/eth0']);
    await waitUntil(async () => recorded.includes('dpu-b'), "b's first full sync recorded");
    expect(recorded).to.deep.equal(['dpu-b']);
  });
});

describeRoot('DPU fleet through the workload API (real daemon, root for test-owned namespaces)', function () {
  this.timeout(60_000);
  const namespaces = new NetnsSet('wn-fleet-');
  let dir: string;
  let daemon: DaemonProcess | undefined;
  const sims: SimProcess[] = [];

  before(async () => {
    dir = scratchDir();
    const agentSocket = path.join(dir, 'agent.sock');
    daemon = await DaemonProcess.start({
      dir,
      netns: namespaces.add().name,
      args: ['--backend', 'dpu', '--agent-socket', agentSocket, '--pod-cidr', '10.253.0.0/24'],
    });
    for (const id of ['dpu-a', 'dpu-b'])
      sims.push(
        SimProcess.start({
          socket: agentSocket,
          agentId: id,
          stateFile: path.join(dir, `${id}.json`),
          extra: ['--max-ports', '8'],
        }),
      );
    const d = daemon;
    await waitUntil(
      async () => (await d.client.status()).backendDetails.agentsHealthy === '2',
      'both agents',
      15_000,
    );
  });

  after(async () => {
    await Promise.all(sims.splice(0).map((s) => s.stop('SIGKILL')));
    await daemon?.stop();
    namespaces.cleanup();
    removeDir(dir);
  });

  it('shows the fleet in Status.dpus and `workloadnet dpus` (text and --json)', async () => {
    const d = daemon!;
    // The inventory follows the hello.
    await waitUntil(
      async () => (await d.client.status()).dpus.every((x) => x.vfsTotal > 0),
      'both inventories',
    );
    const st = await d.client.status();
    expect(st.dpus.map((x) => [x.id, x.connected, x.healthy, x.protocolVersion])).to.deep.equal([
      ['dpu-a', true, true, 4],
      ['dpu-b', true, true, 4],
    ]);
    const a = st.dpus[0]!;
    expect(a.firmwareVersion).to.equal('sim-fw-1.0');
    expect(a.pfs.map((pf) => [pf.index, pf.linkState, pf.vfsTotal])).to.deep.equal([
      [0, 'up', 2048],
      [1, 'up', 2048],
    ]);
    expect(a.vfsTotal).to.equal(4096);
    const cli = (...args: string[]): string =>
      execFileSync(process.execPath, [CLI, 'dpus', '--socket', d.socket, ...args], { encoding: 'utf8' });
    const listed = JSON.parse(cli('--json')) as Array<{ id: string; healthy: boolean; ports: number }>;
    expect(listed.map((x) => [x.id, x.healthy])).to.deep.equal([
      ['dpu-a', true],
      ['dpu-b', true],
    ]);
    const text = cli();
    expect(text).to.match(/^DPU\s+STATE\s+BOOT\s+PROTOCOL\s+FIRMWARE\s+PFS\s+VFS FREE\s+PORTS\s+HEARTBEAT/);
    expect(text).to.match(
      /dpu-a\s+ready\s+\S+\s+4\s+sim-fw-1\.0\s+s[0-9a-f]{4}f0:up,s[0-9a-f]{4}f1:up\s+\d+\/4096\s+0/,
    );
  });

  it('places by the request dpu field, reports the agent, and reads degraded while that DPU is away', async () => {
    const d = daemon!;
    const ns = namespaces.add();
    const r = await d.client.call(
      d.client.raw.attach,
      attachRequest('api-1', ns.path, 'eth0', { dpu: 'dpu-b' }),
    );
    expect(r.backendDetails.dpuAgentId).to.equal('dpu-b');
    await sims[1]!.waitForState((s) => s.ports.some((p) => p.name === 'api-1/eth0'), 'the port on b');
    expect(sims[0]!.state()?.ports ?? []).to.deep.equal([]);

    const bad = await outcome(
      d.client.call(d.client.raw.attach, attachRequest('api-2', ns.path, 'eth1', { dpu: 'not an id' })),
    );
    expect(codeName(bad.code)).to.equal('INVALID_ARGUMENT');
    expect(bad.details).to.match(/dpu must be a DPU agent id/);

    await sims[1]!.stop('SIGKILL');
    await waitUntil(
      async () => (await d.client.status()).backendDetails.agentsAway === 'dpu-b',
      'the loss noticed',
    );
    const st = await d.client.status();
    expect(st.ready, st.reasons.join('; ')).to.equal(true);
    const b = st.dpus.find((x) => x.id === 'dpu-b');
    expect(b).to.include({ connected: false, healthy: false, ports: 1 });
    expect(b?.reason).to.match(/^disconnected: /);
    const got = await d.client.call(d.client.raw.get, { workloadId: 'api-1', ifName: '' });
    expect(got.attachments.map((a) => a.state)).to.deep.equal(['degraded']);
    await d.client.call(d.client.raw.detach, detachRequest('api-1', ns.path));
    const list = await d.client.call(d.client.raw.list, {});
    expect(list.attachments.map((a) => a.workloadId)).to.not.include('api-1');
  });

  it('takes VF settings from the request vf field as from the CNI config, and refuses bad ones before anything changes', async () => {
    const d = daemon!;
    const ns = namespaces.add();
    const vf = {
      maxTxRateMbps: 200,
      minTxRateMbps: 20,
      spoofCheck: false,
      trust: true,
      linkState: 'auto',
      pf: 1,
    };
    const r = await d.client.call(
      d.client.raw.attach,
      attachRequest('vf-1', ns.path, 'eth0', { dpu: 'dpu-a', vf }),
    );
    // The core's option names are the API field's.
    expect(JSON.parse(r.backendDetails.dpuPortOptions ?? '{}')).to.deep.equal(vf);
    const st = await sims[0]!.waitForState((s) => s.ports.some((p) => p.name === 'vf-1/eth0'), 'the port');
    const port = st.ports.find((p) => p.name === 'vf-1/eth0');
    expect(port?.qos).to.deep.equal({
      maxTxRateMbps: 200,
      minTxRateMbps: 20,
      spoofCheck: Toggle.TOGGLE_OFF,
      trust: Toggle.TOGGLE_ON,
      linkState: VfLinkState.VF_LINK_STATE_AUTO,
    });
    expect(port?.vf?.pf).to.equal(1);

    const used = async (): Promise<number | undefined> => (await d.client.status()).pools[0]?.used;
    const before = await used();
    for (const [vf, message] of [
      [{ linkState: 'sideways' }, /linkState must be auto, enable or disable/],
      [{ linkState: '', maxTxRateMbps: 10, minTxRateMbps: 20 }, /must not be above maxTxRateMbps/],
      [{ linkState: '', pf: 7 }, /PF 7/],
    ] as const) {
      const bad = await outcome(
        d.client.call(d.client.raw.attach, attachRequest('vf-2', ns.path, 'eth1', { dpu: 'dpu-a', vf })),
      );
      expect(codeName(bad.code), bad.details).to.equal('INVALID_ARGUMENT');
      expect(bad.details).to.match(message);
    }
    expect(await used()).to.equal(before);
    expect((sims[0]!.state()?.ports ?? []).map((p) => p.name)).to.deep.equal(['vf-1/eth0']);
    await d.client.call(d.client.raw.detach, detachRequest('vf-1', ns.path));
    await sims[0]!.waitForState((s) => s.ports.length === 0, 'the port gone');
  });
});
