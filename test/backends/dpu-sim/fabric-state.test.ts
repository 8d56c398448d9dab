import { expect } from 'chai';
import * as path from 'node:path';
import { AckCode, ObjectKind, type FabricObject } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { removeDir, scratchDir } from '../../support/dpu-fixtures';
import { SimProcess } from '../../support/sim-process';
import { waitUntil } from '../../support/wait-until';
import { localPrefix, peer, route, vtep } from './fabric-objects';
import { ScriptedDaemon, type Session } from './scripted-daemon';

// The simulator's fabric desired state, against a scripted daemon: every object acknowledged with its
// kind, the state file holding exactly the set, snapshot semantics (keep_unlisted_fabric), a restart of
// the same boot resuming the set, and a version-2 simulator carrying no fabric. Control plane only
// (--dataplane none, told its VTEP address); the kernel side is fabric-netns.test.ts.

const held = (sim: SimProcess): Array<{ name: string; generation: number }> =>
  (sim.state()?.fabric ?? []).map((o) => ({ name: o.name, generation: o.generation }));

const expected = (objects: FabricObject[]): Array<{ name: string; generation: number }> =>
  objects.map((o) => ({ name: o.name, generation: o.generation })).sort((a, b) => (a.name < b.name ? -1 : 1));

describe('DPU simulator: fabric objects (protocol version 3)', function () {
  this.timeout(60_000);
  let dir: string;
  let daemon: ScriptedDaemon;
  let sim: SimProcess | undefined;

  function start(extra: string[] = ['--vtep-address', '10.100.1.7'], bootId = 'boot-1'): SimProcess {
    return SimProcess.start({
      socket: daemon.socket,
      agentId: 'dpu-f',
      bootId,
      stateFile: path.join(dir, 'sim.json'),
      extra,
    });
  }

  beforeEach(async () => {
    dir = scratchDir();
    daemon = await ScriptedDaemon.start(path.join(dir, 'agent.sock'));
  });

  afterEach(async () => {
    await sim?.stop('SIGKILL');
    sim = undefined;
    await daemon.stop();
    removeDir(dir);
  });

  function table(g: () => number): FabricObject[] {
    return [
      vtep(g(), '10.100.1.7'),
      localPrefix(g(), '10.244.1.0/26'),
      peer(g(), 'n2', '10.100.1.8'),
      peer(g(), 'n3', '10.100.2.9'),
      route(g(), '10.244.2.0/24', 'peer/n2'),
      route(g(), '10.244.3.0/26', 'peer/n3'),
    ];
  }

  /** A session whose simulator was sent the table above and acked all of it. */
  async function holding(): Promise<{ s: Session; g: () => number; objects: FabricObject[] }> {
    const s = await daemon.session();
    const g = (): number => daemon.nextGeneration();
    const objects = table(g);
    daemon.snapshot(s, objects);
    await daemon.allAcked(s, objects);
    return { s, g, objects };
  }

  it('says hello with version 3, fabric-vxlan and its uplink; acks every object with kind FABRIC and records exactly the set', async () => {
    sim = start();
    const s = await daemon.session();
    expect(s.hello.maxProtocolVersion).to.equal(4);
    expect(s.hello.capabilities?.features).to.include('fabric-vxlan');
    expect(s.hello.uplinkAddresses).to.deep.equal(['10.100.1.7']);
    const g = (): number => daemon.nextGeneration();
    const objects = table(g);
    daemon.snapshot(s, objects);
    const acks = await daemon.allAcked(s, objects);
    for (const a of acks) {
      expect(a.kind, a.name).to.equal(ObjectKind.OBJECT_KIND_FABRIC);
      expect(a.code, `${a.name}: ${a.message}`).to.equal(AckCode.ACK_CODE_OK);
    }
    await sim.waitForState((x) => x.synced && (x.fabric?.length ?? 0) === objects.length, 'fabric recorded');
    expect(held(sim)).to.deep.equal(expected(objects));
    expect(sim.state()?.uplink).to.deep.equal({ addresses: ['10.100.1.7'], mtu: 1500 });

    // One PeerState per peer, never offloaded (a software path).
    await waitUntil(() => s.peerStatus.some((p) => p.peers.length === 2), 'a PeerStatus with both peers');
    const last = s.peerStatus.at(-1)!;
    expect(last.peers.map((p) => p.name).sort()).to.deep.equal(['peer/n2', 'peer/n3']);
    expect(last.peers.every((p) => !p.offloaded && p.reachable && p.lastError === '')).to.equal(true);

    // An Upsert replaces the whole object; a Delete of kind FABRIC removes it.
    const moved = route(g(), '10.244.2.0/24', 'peer/n3');
    daemon.upsert(s, moved);
    expect((await daemon.ackOf(s, moved.name, moved.generation)).code).to.equal(AckCode.ACK_CODE_OK);
    const delGen = daemon.delete(s, 'peer/n2');
    const delAck = await daemon.ackOf(s, 'peer/n2', delGen);
    expect(delAck.kind).to.equal(ObjectKind.OBJECT_KIND_FABRIC);
    expect(delAck.code).to.equal(AckCode.ACK_CODE_OK);
    await sim.waitForState((x) => !(x.fabric ?? []).some((o) => o.name === 'peer/n2'), 'peer/n2 gone');
    expect(sim.state()?.fabric?.find((o) => o.name === moved.name)?.peerRoute?.peer).to.equal('peer/n3');
    // The ports' name space is apart: a port Delete of the same name touches no fabric object.
    await waitUntil(() => (s.peerStatus.at(-1)?.peers.length ?? 0) === 1, 'a PeerStatus without peer/n2');
  });

  it('to a daemon that takes deltas (peer-status-delta) sends its first PeerStatus whole, then only what changed', async () => {
    await daemon.stop();
    daemon = await ScriptedDaemon.start(path.join(dir, 'agent-delta.sock'), {
      features: ['inventory', 'keep-unlisted', 'fabric', 'peer-status-delta'],
    });
    sim = start();
    const { s, g } = await holding();
    // What the daemon holds: the whole one, with every delta after it applied in turn.
    const replayed = (): string[] => {
      const held = new Set<string>();
      for (const p of s.peerStatus) {
        if (!p.delta) held.clear();
        for (const g of p.gone) held.delete(g);
        for (const x of p.peers) held.add(x.name);
      }
      return [...held].sort();
    };
    await waitUntil(() => replayed().length === 2, 'both peers reported');
    expect(s.peerStatus[0]?.delta, 'the first of the session is whole').to.equal(false);
    expect(replayed()).to.deep.equal(['peer/n2', 'peer/n3']);

    const from = s.peerStatus.length;
    const n4 = peer(g(), 'n4', '10.100.3.4');
    daemon.upsert(s, n4);
    await daemon.ackOf(s, n4.name, n4.generation);
    daemon.delete(s, 'peer/n2');
    await waitUntil(
      () => s.peerStatus.slice(from).some((p) => p.gone.includes('peer/n2')),
      'a delta dropping peer/n2',
    );
    expect(replayed()).to.deep.equal(['peer/n3', 'peer/n4']);
    const later = s.peerStatus.slice(from);
    expect(
      later.every((p) => p.delta),
      'every later PeerStatus is a delta',
    ).to.equal(true);
    // Every delta carries only what moved: peer/n4 once, peer/n3 (unchanged) never.
    const named = later.flatMap((p) => p.peers.map((x) => x.name));
    expect(named).to.deep.equal(['peer/n4']);
    // With nothing changing, the heartbeat still reports (an empty delta).
    const quiet = s.peerStatus.length;
    await waitUntil(() => s.peerStatus.length >= quiet + 2, 'two heartbeat reports');
    expect(s.peerStatus.slice(quiet).map((p) => [p.delta, p.peers.length, p.gone.length])).to.deep.include([
      true,
      0,
      0,
    ]);
  });

  it('refuses an invalid object with INVALID and a reason, and keeps what it held', async () => {
    sim = start();
    const { s, g, objects } = await holding();
    const bad: FabricObject[] = [
      { ...peer(g(), 'n2', 'not-an-address') },
      { ...route(g(), '10.244.2.1/24', 'peer/n2') },
      { name: 'route/x', generation: g() },
      { ...peer(g(), 'n4', '10.100.1.9', { vni: 5 }) },
    ];
    for (const o of bad) daemon.upsert(s, o);
    const acks = await daemon.allAcked(s, bad);
    expect(acks.map((a) => a.code)).to.deep.equal(bad.map(() => AckCode.ACK_CODE_INVALID));
    expect(acks[0]!.message).to.match(/not-an-address.*not an IP address/);
    expect(acks[1]!.message).to.match(/host bits set/);
    expect(acks[2]!.message).to.match(/carries no LocalVtep/);
    expect(acks[3]!.message).to.match(/VNI 5 .*differs from the local VTEP's/);
    // The peer with the wrong VNI is held (desired state) but not programmed; the rest are unchanged.
    const after = sim.state()!.fabric!;
    expect(after.find((o) => o.name === 'peer/n2')?.peer?.address).to.equal('10.100.1.8');
    expect(after.find((o) => o.name === 'route/10.244.2.0/24')?.generation).to.equal(objects[4]!.generation);
    await waitUntil(
      () => s.peerStatus.at(-1)?.peers.find((p) => p.name === 'peer/n4')?.reachable === false,
      'peer/n4 reported unreachable',
    );
    expect(s.peerStatus.at(-1)!.peers.find((p) => p.name === 'peer/n4')!.lastError).to.match(/VNI 5/);
  });

  it('keeps unlisted objects under keep_unlisted_fabric and removes them after a complete snapshot', async () => {
    sim = start();
    const first = await holding();
    const { g, objects } = first;
    let s = first.s;
    await sim.waitForState((x) => x.synced && (x.fabric?.length ?? 0) === 6, 'six objects');

    // A restart of the same boot resumes the set from the state file.
    await sim.stop('SIGKILL');
    s.call.end();
    sim = start();
    await sim.waitForState((x) => (x.fabric?.length ?? 0) === 6, 'the resumed set');
    expect(held(sim)).to.deep.equal(expected(objects));
    s = await daemon.session();

    // A snapshot that lists only part, with an incomplete peer table: nothing goes.
    const part = [vtep(g(), '10.100.1.7'), peer(g(), 'n2', '10.100.1.8')];
    const e1 = daemon.snapshot(s, part, { keepUnlistedFabric: true });
    const acks = await daemon.allAcked(s, part);
    expect(
      acks.every((a) => a.code === AckCode.ACK_CODE_OK && a.kind === ObjectKind.OBJECT_KIND_FABRIC),
    ).to.equal(true);
    await sim.waitForState((x) => x.synced && x.epoch === e1, 'the partial snapshot applied');
    expect(held(sim).map((o) => o.name)).to.deep.equal(expected(objects).map((o) => o.name));
    expect(held(sim).find((o) => o.name === 'vtep')?.generation).to.equal(part[0]!.generation);

    // The same with a complete table: the unlisted objects go.
    const e2 = daemon.snapshot(s, part);
    await sim.waitForState((x) => x.synced && x.epoch === e2, 'the complete snapshot applied');
    expect(held(sim).map((o) => o.name)).to.deep.equal(['peer/n2', 'vtep']);

    // A truncated snapshot (fewer objects than SyncComplete counts) removes nothing.
    const epoch = e2 + 100;
    s.call.write({ snapshotBegin: { epoch, keepUnlisted: false, keepUnlistedFabric: false } });
    s.call.write({ syncComplete: { epoch, portCount: 0, fabricCount: 2 } });
    await waitUntil(() => sim!.stderr.includes('snapshot incomplete'), 'the truncated snapshot noticed');
    expect(held(sim).map((o) => o.name)).to.deep.equal(['peer/n2', 'vtep']);
  });

  it('acks a snapshot of 5,000 peers with a route each, one by one, and records all of them', async function () {
    this.timeout(300_000);
    // Logging every object at debug level would be most of the work.
    sim = start(['--vtep-address', '10.100.1.7', '--log-level', 'info']);
    const s = await daemon.session();
    const g = (): number => daemon.nextGeneration();
    const objects: FabricObject[] = [vtep(g(), '10.100.1.7')];
    for (let i = 0; i < 5000; i++) {
      const address = `10.101.${i >> 8}.${i & 255}`;
      objects.push(
        peer(g(), `n${i}`, address),
        route(g(), `10.${128 + (i >> 8)}.${i & 255}.0/24`, `peer/n${i}`),
      );
    }
    daemon.snapshot(s, objects);
    await waitUntil(() => s.acks.length >= objects.length, 'every object acked', 180_000);
    expect(
      s.acks.filter((a) => a.code === AckCode.ACK_CODE_OK && a.kind === ObjectKind.OBJECT_KIND_FABRIC),
    ).to.have.length(objects.length);
    await sim.waitForState(
      (x) => x.synced && (x.fabric?.length ?? 0) === objects.length,
      'all recorded',
      30_000,
    );
  });

  it('as a version-2 agent (--protocol 1-2) advertises no fabric-vxlan, states no uplink and refuses fabric objects', async () => {
    sim = start(['--vtep-address', '10.100.1.7', '--protocol', '1-2']);
    const s = await daemon.session();
    expect(s.hello.maxProtocolVersion).to.equal(2);
    expect(s.hello.capabilities?.features).to.not.include('fabric-vxlan');
    expect(s.hello.uplinkAddresses).to.deep.equal([]);
    expect(s.hello.uplinkMtu).to.equal(0);
    const o = vtep(daemon.nextGeneration(), '10.100.1.7');
    daemon.upsert(s, o);
    const ack = await daemon.ackOf(s, o.name, o.generation);
    expect(ack.code).to.equal(AckCode.ACK_CODE_UNSUPPORTED);
    expect(ack.message).to.match(/need protocol version 3; this session speaks version 2/);
    expect(sim.state()?.fabric ?? []).to.deep.equal([]);
  });

  it('with --no-fabric speaks version 3 but carries no fabric', async () => {
    sim = start(['--vtep-address', '10.100.1.7', '--no-fabric']);
    const s = await daemon.session();
    expect(s.hello.maxProtocolVersion).to.equal(4);
    expect(s.hello.capabilities?.features).to.not.include('fabric-vxlan');
    expect(s.hello.uplinkAddresses).to.deep.equal([]);
  });
  it('counts each object of a burst as one change for the faults: --crash-after cuts the batch after the Nth object and acks exactly N', async () => {
    sim = start(['--vtep-address', '10.100.1.7', '--crash-after', '5']);
    const s = await daemon.session();
    const g = (): number => daemon.nextGeneration();
    const objects = table(g);
    for (let i = 0; i < 6; i++) objects.push(peer(g(), `b${i}`, `10.100.3.${i + 1}`));
    // Twelve Upserts back to back: the simulator takes them together, and still stops after the fifth.
    for (const o of objects) daemon.upsert(s, o);
    expect(await sim.exited).to.equal(70);
    expect(s.acks.map((a) => [a.name, a.code])).to.deep.equal(
      objects.slice(0, 5).map((o) => [o.name, AckCode.ACK_CODE_OK]),
    );
    expect(held(sim)).to.deep.equal(expected(objects.slice(0, 5)));
  });
});
