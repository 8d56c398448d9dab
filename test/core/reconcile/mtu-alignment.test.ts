import { expect } from 'chai';
import type { AttachmentView, AttachSpec } from '../../../core/backend';
import type { LocalNode } from '../../../core/fabric-dataplane';
import type { Netns } from '../../../lib/netns/netns-handle';
import type { ConfigOverrides } from '../../../core/config';
import * as fs from 'node:fs';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';
import { StandInNamespaces } from '../../support/stand-in-netns';
import { waitUntil } from '../../support/wait-until';
import { RecordingFabricDataplane } from '../../support/recording-fabric-dataplane';

// Running interfaces follow their network's MTU when it changes (core/reconcile/mtu-alignment.ts): after
// the start-up reconcile (a restart with another uplink MTU, or another configured mtu) and when the
// fabric's dataplane reports another uplink while the daemon runs. In place, through Backend.setMtu,
// under the workload's lock; never an MTU the call asked for, never in a namespace that is gone, never
// before the fabric's MTU is known. A daemon in this process, a recording backend, stand-in namespaces.

/** A fabric dataplane whose node can change while it runs, as the Linux one's uplink can. */
class ChangingDataplane extends RecordingFabricDataplane {
  private listener?: (local: LocalNode) => void;
  onLocalChange(listener: (local: LocalNode) => void): void {
    this.listener = listener;
  }
  change(local: Partial<LocalNode>): void {
    this.local = { ...this.local, ...local };
    this.listener?.(this.local);
  }
}

/** A backend that changes MTUs in place, and records each change. */
class MtuBackend extends RecordingBackend {
  readonly fabric = new ChangingDataplane();
  readonly mtuCalls: Array<{ key: string; mtu: number; netns: string }> = [];
  /** Keys whose change fails. */
  readonly refuse = new Set<string>();
  /** Held until released: a change in progress. */
  gate?: Promise<void>;
  /** `before`: the backend of the daemon before a restart, whose dataplane this one finds in place. */
  constructor(uplinkMtu: number, before?: RecordingBackend) {
    super();
    this.fabric.local = { ...this.fabric.local, mtu: uplinkMtu };
    for (const [key, spec] of before?.programmed ?? []) this.programmed.set(key, spec);
  }
  async setMtu(att: AttachmentView, netns: Netns, mtu: number): Promise<void> {
    this.calls.push({ op: 'setMtu', key: att.key });
    await this.gate;
    if (this.refuse.has(att.key)) throw new Error(`${att.key}: the kernel said no`);
    this.mtuCalls.push({ key: att.key, mtu, netns: netns.path });
    const spec = this.programmed.get(att.key);
    if (spec) this.programmed.set(att.key, { ...spec, mtu } as AttachSpec);
  }
}

describe('running interfaces follow their network’s MTU', function () {
  this.timeout(60_000);
  const namespaces = new StandInNamespaces();
  let d: InProcessDaemon | undefined;
  const vxlan: ConfigOverrides = { fabric: { mode: 'vxlan' } };

  afterEach(async () => {
    await d?.dispose();
    d = undefined;
  });
  after(() => namespaces.cleanup());

  const service = () => (d as InProcessDaemon).daemon.service;
  async function attach(id: string, mtu?: number): Promise<string> {
    const ns = namespaces.add();
    await service().attach({
      workloadId: id,
      netnsPath: ns.path,
      ifName: 'eth0',
      ...(mtu === undefined ? {} : { mtu }),
    });
    return ns.path;
  }
  const rows = async () => [...(await service().list())].map((a) => [a.workloadId, a.mtu]);
  const network = async () => (await service().status()).networks?.[0];

  it('after a restart with a smaller uplink: each attachment of the network’s MTU gets the new one in place; a call’s own is kept', async () => {
    const old = new MtuBackend(9000);
    d = await InProcessDaemon.start(old, vxlan, { netns: namespaces });
    const w1 = await attach('w1');
    await attach('w2');
    await attach('w3', 9000);
    const backend = new MtuBackend(1500, old);
    d = await d.restart(backend);
    await waitUntil(async () => (await network())?.mtuUpdated === 2, 'two interfaces changed');
    expect(await rows()).to.deep.equal([
      ['w1', 1450],
      ['w2', 1450],
      ['w3', 9000],
    ]);
    expect(backend.mtuCalls).to.deep.include({ key: 'w1/eth0', mtu: 1450, netns: w1 });
    expect(backend.mtuCalls.map((c) => c.key).sort()).to.deep.equal(['w1/eth0', 'w2/eth0']);
    // Never attached again (the dataplane was in place, so the start-up reconcile repaired nothing).
    expect(backend.calls.filter((c) => c.op === 'attach')).to.deep.equal([]);
    expect((await service().get('w1', 'eth0'))[0]?.dataplane?.mtu, 'the recorded dataplane').to.equal(1450);
    // Only the call's own 9000 is counted above the fabric now.
    const st = await service().status();
    expect(st.fabric?.warnings.join('\n')).to.include('1 attachment(s) run with a larger MTU');
    expect(st.networks?.[0]?.mtuFailed).to.equal(0);
    const metrics = await d.metrics.registry.getSingleMetricAsString('workloadnet_mtu_changes_total');
    expect(metrics).to.include('workloadnet_mtu_changes_total{outcome="updated"} 2');
  });

  it('follows an uplink MTU that changes while the daemon runs', async () => {
    const backend = new MtuBackend(1500);
    d = await InProcessDaemon.start(backend, vxlan, { netns: namespaces });
    await attach('w1');
    expect(await rows()).to.deep.equal([['w1', 1450]]);
    backend.fabric.change({ mtu: 1400 });
    await waitUntil(async () => (await rows())[0]?.[1] === 1350, 'the running interface follows');
    expect(backend.mtuCalls).to.have.length(1);
    // A report of the same uplink again changes nothing.
    backend.fabric.change({ mtu: 1400 });
    backend.fabric.change({ mtu: 1400, subnets: ['192.0.2.0/25'] });
    await new Promise((r) => setImmediate(r));
    expect(backend.mtuCalls).to.have.length(1);
  });

  it('applies a configured mtu changed across a restart, and a failure is counted and kept', async () => {
    const old = new MtuBackend(1500);
    d = await InProcessDaemon.start(old, { mtu: 1400 }, { netns: namespaces });
    await attach('w1');
    await attach('w2');
    const dir = d.dir;
    await d.stop();
    const backend = new MtuBackend(1500, old);
    backend.refuse.add('w2/eth0');
    d = await InProcessDaemon.start(backend, { mtu: 1300 }, { netns: namespaces, dir });
    await waitUntil(async () => (await network())?.mtuUpdated === 1, 'one interface changed');
    await waitUntil(async () => (await network())?.mtuFailed === 1, 'one failure counted');
    expect(await rows()).to.deep.equal([
      ['w1', 1300],
      ['w2', 1400],
    ]);
    // The one that failed, detached, is no longer counted.
    await service().detach({ workloadId: 'w2', ifName: 'eth0' });
    expect((await network())?.mtuFailed).to.equal(0);
    expect(await d.metrics.registry.getSingleMetricAsString('workloadnet_mtu_changes_total')).to.include(
      'workloadnet_mtu_changes_total{outcome="failed"} 1',
    );
  });

  it('leaves an attachment whose namespace is gone to the sweep, and does nothing before the fabric’s MTU is known', async () => {
    const old = new MtuBackend(9000);
    d = await InProcessDaemon.start(old, vxlan, { netns: namespaces });
    const gone = await attach('w1');
    await attach('w2');
    fs.rmSync(gone);
    const unprepared = new MtuBackend(1500, old);
    unprepared.fabric.prepareError = new Error('no default route');
    d = await d.restart(unprepared);
    // The 1450 a new interface gets meanwhile is a guess: running ones keep theirs.
    await new Promise((r) => setTimeout(r, 200));
    expect(unprepared.calls.filter((c) => c.op === 'setMtu')).to.deep.equal([]);
    const backend = new MtuBackend(1500, old);
    d = await d.restart(backend);
    await waitUntil(async () => (await network())?.mtuUpdated === 1, 'the one in its namespace changed');
    expect(backend.mtuCalls.map((c) => c.key)).to.deep.equal(['w2/eth0']);
    expect((await service().get('w1', 'eth0'))[0]?.mtu, 'the gone one untouched').to.equal(8950);
  });

  it('does not hold a shutdown for a change that does not finish', async () => {
    const backend = new MtuBackend(1500);
    d = await InProcessDaemon.start(backend, vxlan, { netns: namespaces });
    await attach('w1');
    let open!: () => void;
    backend.gate = new Promise<void>((r) => (open = r));
    backend.fabric.change({ mtu: 1400 });
    await waitUntil(async () => backend.calls.some((c) => c.op === 'setMtu'), 'a change under way');
    const dir = d.dir;
    await d.stop();
    d = undefined;
    // The change answers after the store closed: it records nothing, and the next start finds the row
    // as it was, and changes it again (setMtu is idempotent).
    open();
    await new Promise((r) => setTimeout(r, 50));
    const next = new MtuBackend(1400, backend);
    d = await InProcessDaemon.start(next, vxlan, { netns: namespaces, dir });
    await waitUntil(async () => (await rows())[0]?.[1] === 1350, 'changed at the next start');
    expect(next.mtuCalls.map((c) => [c.key, c.mtu])).to.deep.equal([['w1/eth0', 1350]]);
  });

  it('serialises with Detach and Attach of the same workload: a row detached or attached again meanwhile is left alone', async () => {
    const backend = new MtuBackend(1500);
    d = await InProcessDaemon.start(backend, vxlan, { netns: namespaces });
    await attach('w1');
    await attach('w2');
    let open!: () => void;
    backend.gate = new Promise<void>((r) => (open = r));
    backend.fabric.change({ mtu: 1400 });
    await waitUntil(async () => backend.calls.some((c) => c.op === 'setMtu'), 'a change under way');
    const first = (backend.calls.find((c) => c.op === 'setMtu') as { key: string }).key;
    const other = first === 'w1/eth0' ? 'w2' : 'w1';
    // Detach of the workload being changed waits for the change; of the other, it runs before its turn.
    let detached = false;
    const detaching = service()
      .detach({ workloadId: first.split('/')[0] as string, ifName: 'eth0' })
      .then(() => (detached = true));
    await service().detach({ workloadId: other, ifName: 'eth0' });
    await attach(other);
    await new Promise((r) => setTimeout(r, 50));
    expect(detached, 'Detach waits for the change of its workload').to.equal(false);
    open();
    await detaching;
    await waitUntil(async () => (await rows()).length === 1, 'one left');
    // The re-attached one got the new MTU at attach; the detached one is not written back.
    expect(await rows()).to.deep.equal([[other, 1350]]);
    expect(backend.calls.filter((c) => c.op === 'setMtu').map((c) => c.key)).to.deep.equal([first]);
  });
});
