import { expect } from 'chai';
import type { DataplaneResult } from '../../../core/backend';
import type { DpuBackend } from '../../../backends/dpu';
import { expectCode, spec, view } from '../../support/dpu-fixtures';
import { simRig } from '../../support/sim-rig';
import { SimProcess, sleep, waitUntil } from '../../support/sim-process';
import { attachTo } from '../../support/attach-spec';
import { NetnsHandle } from '../../../lib/netns/netns-handle';

// The DPU backend against the real simulator process: sessions, acks, failures and resynchronisation,
// observed from both ends (the backend's results and health, the simulator's state file).

/**
 * "At once" for an Attach refused without waiting on an agent: half the 3 s ack timeout of the test
 * backend (fixtures.ts) it would otherwise wait out, with room for a loaded machine (these tests tell
 * the two apart, not speed).
 */
const FAST_MS = 1500;

describe('DPU backend with the simulator', function () {
  this.timeout(30_000);
  let backend: DpuBackend | undefined;
  const rig = simRig();

  async function connected(s: SimProcess): Promise<void> {
    await s.waitForState((st) => st.session.state === 'connected' && st.synced, 'connected and synced');
  }

  it('accepts the agent, reports it in health, and refuses a second agent with the same id', async () => {
    backend = await rig.startBackend();
    const h0 = await backend.health();
    expect(h0.ready).to.equal(false);
    expect(h0.reasons.join(' ')).to.match(/no DPU agent connected/);
    const first = rig.sim('dpu-a', [], 'boot-1');
    await connected(first);
    const h1 = await backend.health();
    expect(h1.ready, h1.reasons.join('; ')).to.equal(true);
    expect(h1.details).to.include({ agentId: 'dpu-a', bootId: 'boot-1', synced: true });
    expect(h1.details?.lastHeartbeatAgeMs).to.be.a('number').lessThan(1000);

    const second = rig.sim('dpu-a', [], 'boot-2', 'dpu-a-second.json');
    const st = await second.waitForState((s) => (s.session.rejections ?? 0) >= 1, 'rejected');
    expect(st.session.lastRejectReason).to.match(/agent dpu-a is already connected.*same id is refused/);
    const h2 = await backend.health();
    expect(h2.details).to.include({ agentId: 'dpu-a', bootId: 'boot-1' });
    expect(first.state()?.session.state).to.equal('connected');
  });

  it('completes Attach when the agent acks the port at the generation sent', async () => {
    backend = await rig.startBackend();
    const s = rig.sim('dpu-a');
    await connected(s);
    const res = await attachTo(backend, spec(1));
    const st = await s.waitForState((x) => x.ports.length === 1, 'one port');
    const port = st.ports[0];
    expect(port?.name).to.equal('w1/eth0');
    expect(port?.generation).to.equal(res.details?.dpuGeneration);
    expect(port?.mac)
      .to.equal(res.mac)
      .and.to.match(/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
    expect(port?.ips).to.deep.equal(['10.90.0.3/32']);
    expect(port?.routes).to.deep.equal([{ destination: '0.0.0.0/0', gateway: '169.254.1.1' }]);
    expect(port?.mtu).to.equal(1500);
    expect(res.hostIfName, 'no endpoint without the host-endpoint feature').to.equal(undefined);

    // A changed port gets a newer generation, and the agent ends up holding that one.
    const res2 = await attachTo(backend, spec(1, { mtu: 1400 }));
    expect(res2.details?.dpuGeneration).to.be.greaterThan(res.details?.dpuGeneration as number);
    await s.waitForState(
      (x) => x.ports[0]?.mtu === 1400 && x.ports[0]?.generation === res2.details?.dpuGeneration,
      'mtu 1400',
    );
    expect(res2.mac, 'the MAC stays with the key').to.equal(res.mac);

    await backend.detach(view(spec(1), res2));
    await s.waitForState((x) => x.ports.length === 0, 'port deleted');
  });

  it("changes a port's MTU in place at its agent when it has no end in the workload (setMtu)", async () => {
    backend = await rig.startBackend();
    const s = rig.sim('dpu-a');
    await connected(s);
    const res = await attachTo(backend, spec(1));
    // No netdev is moved for a port without a host endpoint: the namespace handle goes unused.
    const ns = await NetnsHandle.open('/proc/self/ns/net');
    try {
      await backend.setMtu(view(spec(1), res), ns, 1400);
    } finally {
      ns.close();
    }
    const st = await s.waitForState((x) => x.ports[0]?.mtu === 1400, 'mtu 1400 at the agent');
    expect(st.ports[0]?.generation).to.be.greaterThan(res.details?.dpuGeneration as number);
    expect(await backend.check(view(spec(1, { mtu: 1400 }), res))).to.deep.equal([]);
  });

  it('waits for acks of different workloads concurrently', async () => {
    backend = await rig.startBackend({ ackTimeoutMs: 30_000 });
    // Each ack comes 3 s after the agent has taken the port. Sent one after another's ack, the agent
    // would hold one port at a time; sent concurrently, it holds all forty before any ack is back.
    // Whatever the machine's speed, 3 s is far longer than sending forty upserts.
    const s = rig.sim('dpu-a', ['--ack-latency-ms', '3000']);
    await connected(s);
    let answered = 0;
    const attaches = Array.from({ length: 40 }, (_, i) =>
      attachTo(backend!, spec(i)).then((r) => {
        answered++;
        return r;
      }),
    );
    await s.waitForState((x) => x.ports.length === 40, 'forty ports taken');
    expect(answered, 'attaches answered before the agent held every port').to.equal(0);
    const results = await Promise.all(attaches);
    expect(new Set(results.map((r) => r.details?.dpuGeneration)).size).to.equal(40);
  });

  it("fails Attach with the agent's code and message when the agent refuses the port, leaving nothing behind", async () => {
    backend = await rig.startBackend();
    const s = rig.sim('dpu-a', ['--error-rate', '1', '--error-code', 'no-resources']);
    await connected(s);
    const err = await expectCode(attachTo(backend, spec(1)), 'RESOURCE_EXHAUSTED');
    expect(err.message).to.match(
      /w1\/eth0.*rejected by the agent \(NO_RESOURCES\): injected no-resources failure/,
    );
    expect(err.retryable).to.equal(true);
    expect((await backend.health()).details?.ports).to.equal(0);
    expect(s.state()?.ports).to.deep.equal([]);
    await s.stop('SIGKILL');

    const inv = rig.sim('dpu-b', ['--error-rate', '1', '--error-code', 'invalid']);
    await connected(inv);
    const err2 = await expectCode(attachTo(backend, spec(2)), 'INVALID_ARGUMENT');
    expect(err2.message).to.match(/\(INVALID\): injected invalid failure/);
  });

  it('fails Attach with UNAVAILABLE at once without an agent (not after the ack timeout), and recovers when one connects', async () => {
    backend = await rig.startBackend();
    const t = Date.now();
    const err = await expectCode(attachTo(backend, spec(1)), 'UNAVAILABLE');
    expect(Date.now() - t).to.be.lessThan(FAST_MS);
    expect(err.message).to.match(/no DPU agent is connected on .*agent\.sock/);
    expect(err.retryable).to.equal(true);
    expect((await backend.health()).ready).to.equal(false);

    const s = rig.sim('dpu-a');
    await connected(s);
    await waitUntil(async () => (await backend!.health()).ready, 'health ready');
    await attachTo(backend, spec(1));

    await s.stop('SIGKILL');
    await waitUntil(async () => !(await backend!.health()).ready, 'health not ready after the agent died');
    const t2 = Date.now();
    const err2 = await expectCode(attachTo(backend, spec(2)), 'UNAVAILABLE');
    expect(Date.now() - t2).to.be.lessThan(FAST_MS);
    expect(err2.message).to.match(/dpu-a disconnected/);
  });

  it('fails Attach with UNAVAILABLE when the stream drops mid-attach, and the agent drops the port on resync', async () => {
    backend = await rig.startBackend();
    const s = rig.sim('dpu-a', ['--drop-stream-after', '1']);
    await connected(s);
    const firstSession = s.state()?.session.sessionId;
    const t = Date.now();
    const err = await expectCode(attachTo(backend, spec(1)), 'UNAVAILABLE');
    expect(Date.now() - t).to.be.lessThan(FAST_MS);
    expect(err.message).to.match(/stream to DPU agent dpu-a ended while waiting for port w1\/eth0/);
    const again = await s.waitForState(
      (x) => x.session.state === 'connected' && x.synced && x.session.sessionId !== firstSession,
      'reconnected',
    );
    expect(again.ports).to.deep.equal([]);
    await attachTo(backend, spec(2));
    await s.waitForState((x) => x.ports.map((p) => p.name).join() === 'w2/eth0', 'only w2');
  });

  it('fails Attach with DEADLINE_EXCEEDED when the ack is late, and the agent ends up without the port', async () => {
    backend = await rig.startBackend({ ackTimeoutMs: 300 });
    const s = rig.sim('dpu-a', ['--ack-latency-ms', '1000']);
    await connected(s);
    const t = Date.now();
    const err = await expectCode(attachTo(backend, spec(1)), 'DEADLINE_EXCEEDED');
    // Not before its deadline; how long after it depends on the machine, the code says it was the deadline.
    expect(Date.now() - t).to.be.at.least(250);
    expect(err.message).to.match(/not acknowledged within 300 ms/);
    // The rollback's Delete follows the Upsert, so the agent applies both in order.
    await s.waitForState((x) => x.ports.length === 0, 'no port', 5000);
    expect((await backend.health()).details?.ports).to.equal(0);
  });

  it('re-programs every port when the agent comes back with a new boot id', async () => {
    backend = await rig.startBackend();
    const s1 = rig.sim('dpu-a', ['--crash-after', '3'], 'boot-1');
    await connected(s1);
    const results: DataplaneResult[] = [];
    for (const i of [1, 2, 3]) results.push(await attachTo(backend, spec(i)));
    expect(await s1.exited).to.equal(70);
    await waitUntil(async () => !(await backend!.health()).ready, 'agent loss noticed');

    const s2 = rig.sim('dpu-a', [], 'boot-2');
    const st = await s2.waitForState((x) => x.synced && x.ports.length === 3, 'three ports re-programmed');
    expect(st.bootId).to.equal('boot-2');
    expect(st.ports.map((p) => [p.name, p.generation])).to.deep.equal(
      results.map((r, i) => [`w${i + 1}/eth0`, r.details?.dpuGeneration]),
    );
    // The simulator counts itself synced on SyncComplete; the daemon, once the snapshot's acks are in.
    await waitUntil(async () => (await backend!.health()).details?.synced === true, 'daemon sees the sync');
    const h = await backend.health();
    expect(h.details).to.include({ bootId: 'boot-2', synced: true });
  });

  it('makes the agent remove a port that is not in the snapshot, after SyncComplete', async () => {
    backend = await rig.startBackend();
    const s1 = rig.sim('dpu-a', [], 'boot-1');
    await connected(s1);
    const a = await attachTo(backend, spec(1));
    const b = await attachTo(backend, spec(2));
    // The state file stands for the DPU's memory: make sure it holds both before the agent dies.
    await s1.waitForState((x) => x.ports.length === 2, 'two ports held');
    await s1.stop('SIGKILL');
    await waitUntil(async () => !(await backend!.health()).ready, 'agent loss noticed');
    // Detached while the agent is away: the agent still holds the port when it returns.
    await backend.detach(view(spec(2), b));

    // Same boot id: the simulator resumes the table it had (both ports) from its state file.
    const s2 = rig.sim('dpu-a', [], 'boot-1');
    const st = await s2.waitForState((x) => x.synced, 'synced');
    expect(st.ports.map((p) => p.name)).to.deep.equal(['w1/eth0']);
    expect(st.ports[0]?.generation).to.equal(a.details?.dpuGeneration);
    // The log line and the state file are written apart: wait for the line rather than race it.
    await waitUntil(async () => /stale port removed after sync/.test(s2.stderr), 'the removal logged');
    await waitUntil(
      async () => (await backend!.health()).details?.agentRemovedPorts === 1,
      'removal reported',
    );
  });

  it('leaves the stale port in place when the agent ignores snapshots (the check above can fail)', async () => {
    backend = await rig.startBackend();
    const s1 = rig.sim('dpu-a', [], 'boot-1');
    await connected(s1);
    await attachTo(backend, spec(1));
    const b = await attachTo(backend, spec(2));
    // The state file stands for the DPU's memory: make sure it holds both before the agent dies.
    await s1.waitForState((x) => x.ports.length === 2, 'two ports held');
    await s1.stop('SIGKILL');
    await waitUntil(async () => !(await backend!.health()).ready, 'agent loss noticed');
    await backend.detach(view(spec(2), b));
    const s2 = rig.sim('dpu-a', ['--ignore-snapshot'], 'boot-1');
    await s2.waitForState((x) => x.session.state === 'connected', 'connected');
    await sleep(300);
    expect(s2.state()?.ports.map((p) => p.name)).to.deep.equal(['w1/eth0', 'w2/eth0']);
  });

  it('after a daemon restart, sends no snapshot before reconcile and then exactly the ports it was given', async () => {
    backend = await rig.startBackend();
    const s = rig.sim('dpu-a', [], 'boot-1');
    await connected(s);
    const specs = [1, 2, 3].map((i) => spec(i));
    const results: DataplaneResult[] = [];
    for (const sp of specs) results.push(await attachTo(backend, sp));
    const before = await s.waitForState((x) => x.ports.length === 3, 'three ports');
    await backend.stop();

    // The restarted daemon has not reconciled yet: the agent may connect but must keep its ports.
    backend = await rig.startBackend({}, false);
    await s.waitForState((x) => x.session.state === 'connected', 'reconnected');
    await sleep(300);
    const waiting = s.state();
    expect(waiting?.synced).to.equal(false);
    expect(waiting?.ports.length).to.equal(3);
    expect((await backend.health()).reasons.join(' ')).to.match(/reconcile has not run/);
    await expectCode(attachTo(backend, spec(9)), 'UNAVAILABLE');

    // Workload 3 went away while the daemon was down, so the store no longer has it.
    const outcome = await backend.reconcile([view(specs[0]!, results[0]), view(specs[1]!, results[1])]);
    expect(outcome.healthy).to.deep.equal(['w1/eth0', 'w2/eth0']);
    expect(outcome.missing).to.deep.equal([]);
    const after = await s.waitForState((x) => x.synced && x.ports.length === 2, 'two ports after sync');
    expect(after.epoch).to.be.greaterThan(0);
    expect(after.ports).to.deep.equal(before.ports.slice(0, 2));
    // New changes are newer than anything restored.
    const r4 = await attachTo(backend, spec(4));
    expect(r4.details?.dpuGeneration).to.be.greaterThan(
      Math.max(...results.slice(0, 2).map((r) => r.details?.dpuGeneration as number)),
    );
  });

  it('asks the agent to keep the ports it holds when the store is new (lost), instead of wiping them', async () => {
    backend = await rig.startBackend();
    const s = rig.sim('dpu-a', [], 'boot-1');
    await connected(s);
    for (const i of [1, 2]) await attachTo(backend, spec(i));
    await s.waitForState((x) => x.ports.length === 2, 'two ports');
    await backend.stop();

    // A new, empty store: the desired state is empty, but that is no evidence the ports are unwanted.
    backend = await rig.startBackend({}, false);
    const outcome = await backend.reconcile([], { storeIsNew: true });
    expect(outcome.warnings.join(' ')).to.match(/the store is new: DPU agents are asked to keep ports/);
    await waitUntil(async () => /keeping ports the snapshot does not list/.test(s.stderr), 'the kept ports');
    await s.waitForState((x) => x.synced, 'synced');
    expect(s.state()?.ports.map((p) => p.name)).to.deep.equal(['w1/eth0', 'w2/eth0']);
    expect((await backend.health()).details?.agentsKeepUnlistedPorts).to.equal(true);
  });

  it('reports not-ready when the agent stops heartbeating, and recovers when it resumes', async () => {
    backend = await rig.startBackend({ heartbeatIntervalMs: 100 });
    const s = rig.sim('dpu-a');
    await connected(s);
    s.child.kill('SIGSTOP');
    try {
      await waitUntil(async () => !(await backend!.health()).ready, 'not ready', 3000);
      const h = await backend.health();
      expect(h.reasons.join(' ')).to.match(/no message from the agent|silent/);
      const t = Date.now();
      await expectCode(attachTo(backend, spec(1)), 'UNAVAILABLE');
      expect(Date.now() - t).to.be.lessThan(FAST_MS);
    } finally {
      s.child.kill('SIGCONT');
    }
    await waitUntil(async () => (await backend!.health()).ready, 'ready again', 5000);
    await attachTo(backend, spec(1));
  });
});
