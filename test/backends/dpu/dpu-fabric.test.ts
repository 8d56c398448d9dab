import { expect } from 'chai';
import { status as grpcStatus } from '@grpc/grpc-js';
import type { LocalNode, OwnPrefixes } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import {
  AckCode,
  ObjectKind,
  type AgentMessage,
  AgentMessage as AgentMessageCodec,
  type PeerState,
} from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { vtepMac } from '../../../lib/vtep-mac';
import { okAck } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';
import { rawAgentBackend } from '../../support/raw-agent-backend';
import { VXLAN_SETTINGS, n3, n4 } from '../../support/fabric-fixtures';
import { fabricAck, fabricUpserts, snapshot, v3Hello } from './fabric-stream';
import { waitUntil } from '../../support/sim-process';

// The DPU backend's fabric against its real agent server, with hand-driven agents: a version 3 agent
// that carries the fabric gets its objects in every snapshot and acks them one by one, and the node is
// ready only once it acked the last; a version 2 agent keeps serving ports and is told no fabric.

const own = (slices: Record<string, string[]>): OwnPrefixes => ({
  ranges: ['10.244.0.0/24'],
  byEndpoint: new Map(Object.entries(slices)),
});

describe('DPU backend: the fabric on the agent stream (protocol version 3)', function () {
  this.timeout(30_000);
  const rig = rawAgentBackend({ backend: () => ({ nodeName: 'n1' }) });
  const connect = (hello: AgentMessage): RawAgent => rig.connect(hello);

  it('sends the fabric as desired state, and is ready only once the agent acked the last object', async () => {
    const b = rig.backend;
    const changes: LocalNode[] = [];
    b.fabric.onLocalChange((l) => changes.push(l));
    await b.fabric.prepare(VXLAN_SETTINGS);

    const a = connect(v3Hello('dpu-a'));
    const accept = await a.next((m) => !!m.helloAccept, 'the accept');
    expect(accept.helloAccept?.protocolVersion).to.equal(3);
    expect(accept.helloAccept?.capabilities?.features).to.include('fabric');
    const first = await snapshot(a);
    expect(first.begin.snapshotBegin?.keepUnlistedFabric, 'no table applied yet').to.equal(true);
    expect(first.end.syncComplete?.fabricCount).to.equal(0);
    await waitUntil(() => changes.length === 1, 'the new endpoint told to the listeners');
    expect(changes[0]?.endpoints?.map((e) => [e.id, e.underlay, e.vtep.mac])).to.deep.equal([
      ['dpu-a', '10.0.1.11', '0e:77:0a:00:01:0b'],
    ]);
    expect(b.fabric.report().reasons).to.include('the fabric has not been applied yet');

    const from = a.received.length;
    const report = await b.fabric.apply([n3], own({ 'dpu-a': ['10.244.0.0/26'] }));
    expect(report.ready).to.equal(false);
    expect(report.reasons).to.deep.equal(['DPU agent dpu-a has not acknowledged 4 of its 4 fabric objects']);
    await waitUntil(() => fabricUpserts(a, from).length === 4, 'four fabric upserts');
    const objects = fabricUpserts(a, from);
    expect(objects.map((o) => o.name).sort()).to.deep.equal([
      'peer/n3',
      'prefix/10.244.0.0/26',
      'route/10.244.2.0/24',
      'vtep',
    ]);
    expect(b.fabric.local().endpoints?.[0]?.prefixes).to.deep.equal(['10.244.0.0/26']);

    const [last, ...rest] = objects;
    for (const o of rest) a.send(fabricAck(o));
    // Acks that must change nothing: a fabric name acked as a port, a generation never sent, a name
    // never desired, and an older generation.
    a.send(okAck(last!.name, last!.generation));
    a.send(fabricAck(last!, { generation: last!.generation + 1000 }));
    a.send(fabricAck({ ...last!, name: 'peer/nobody' }));
    a.send(fabricAck(last!, { generation: last!.generation - 1 }));
    await waitUntil(
      () =>
        b.fabric.report().reasons.join() === 'DPU agent dpu-a has not acknowledged 1 of its 4 fabric objects',
      'three acks counted',
    );
    a.send({ heartbeat: { seq: 1, sentAtUnixMs: Date.now() } });
    await new Promise((r) => setTimeout(r, 300));
    expect(b.fabric.report().ready, 'stale and unknown acks do not count').to.equal(false);
    expect(a.isEnded, 'nor do they end the stream').to.equal(false);
    a.send(fabricAck(last!));
    await waitUntil(() => b.fabric.report().ready, 'ready after the last ack');
    const ready = b.fabric.report();
    expect(ready.objects).to.deep.equal({ routes: 1, neighbours: 0, fdb: 1 });

    // What the agent says of its peers shows per peer node.
    a.send({
      peerStatus: {
        peers: [
          { name: 'peer/n3', reachable: true, offloaded: true, txPackets: 5, rxPackets: 7, lastError: '' },
        ],
        delta: false,
        gone: [],
      },
    });
    await waitUntil(() => (b.fabric.report().peers[0]?.seenBy ?? []).length === 1, 'the peer status');
    expect(b.fabric.report().peers).to.deep.equal([
      {
        node: 'n3',
        path: 'vxlan',
        prefixes: ['10.244.2.0/24'],
        seenBy: [
          { endpoint: 'dpu-a', reachable: true, offloaded: true, txPackets: 5, rxPackets: 7, lastError: '' },
        ],
      },
    ]);
    const row = (await b.health()).dpus?.find((d) => d.id === 'dpu-a');
    expect(row?.fabric).to.deep.equal({
      carries: true,
      note: '',
      vtep: '10.0.1.11',
      objectsAcked: 4,
      objectsDesired: 4,
      peersReachable: 1,
      peersTotal: 1,
    });

    // Gone briefly: its endpoint stays in the node record; back, it gets the whole fabric again,
    // this time as a complete list, and holds readiness back until it acked it.
    a.close();
    await waitUntil(
      () => b.fabric.report().reasons.includes('no DPU agent is connected to carry the fabric'),
      'the agent lost',
    );
    expect(b.fabric.local().endpoints?.map((e) => e.id)).to.deep.equal(['dpu-a']);
    const again = connect(v3Hello('dpu-a'));
    const second = await snapshot(again);
    expect(second.begin.snapshotBegin?.keepUnlistedFabric).to.equal(false);
    expect(second.end.syncComplete?.fabricCount).to.equal(4);
    expect(second.fabric.map((o) => [o.name, o.generation])).to.deep.equal(
      [...objects].sort((x, y) => (x.name < y.name ? -1 : 1)).map((o) => [o.name, o.generation]),
    );
    expect(b.fabric.report().ready, 'not ready until the new session acked').to.equal(false);
    const held = await b.health();
    expect(held.ready, 'the node is not network-ready while the reconnected DPU lacks its fabric').to.equal(
      false,
    );
    expect(held.reasons.join()).to.include('DPU agent dpu-a has not acknowledged its fabric yet (4 of 4');
    for (const o of second.fabric) again.send(fabricAck(o));
    await waitUntil(() => b.fabric.report().ready, 'ready after the resync');
    expect((await b.health()).ready, 'network-ready once the DPU acked its fabric').to.equal(true);
    expect(changes.length, 'the same endpoint back is no change of the node').to.equal(1);

    // A peer that left: its objects go by Delete, acked like a change.
    const before = again.received.length;
    await b.fabric.apply([n4], own({ 'dpu-a': ['10.244.0.0/26'] }));
    await waitUntil(
      () => again.received.slice(before).filter((m) => m.delete).length === 2,
      'the Deletes of the peer that left',
    );
    const deletes = again.received.slice(before).flatMap((m) => (m.delete ? [m.delete] : []));
    expect(deletes.map((d) => [d.name, d.kind]).sort()).to.deep.equal([
      ['peer/n3', ObjectKind.OBJECT_KIND_FABRIC],
      ['route/10.244.2.0/24', ObjectKind.OBJECT_KIND_FABRIC],
    ]);
    for (const d of deletes) again.send(okAck(d.name, d.generation, { kind: ObjectKind.OBJECT_KIND_FABRIC }));
    const added = fabricUpserts(again, before);
    expect(added.map((o) => o.name).sort()).to.deep.equal(['peer/n4', 'route/10.244.3.0/24']);
    for (const o of added) again.send(fabricAck(o));
    await waitUntil(() => b.fabric.report().ready, 'ready with the new table');
    expect(b.fabric.report().peers.map((p) => p.node)).to.deep.equal(['n4']);
  });

  it('tells a second DPU of the node to the first, as a peer of the fabric', async () => {
    const b = rig.backend;
    await b.fabric.prepare(VXLAN_SETTINGS);
    await b.fabric.apply([], own({ 'dpu-a': ['10.244.0.0/26'], 'dpu-b': ['10.244.0.64/26'] }));
    const a = connect(v3Hello('dpu-a'));
    const sa = await snapshot(a);
    expect(sa.begin.snapshotBegin?.keepUnlistedFabric).to.equal(false);
    expect(sa.fabric.map((o) => o.name)).to.deep.equal(['prefix/10.244.0.0/26', 'vtep']);
    const from = a.received.length;
    const bAgent = connect(v3Hello('dpu-b', { uplinkAddresses: ['10.0.1.12'] }));
    const sb = await snapshot(bAgent);
    const beginAt = bAgent.received.indexOf(sb.begin);
    expect(fabricUpserts(bAgent).length, 'nothing sent before its snapshot, nothing twice').to.equal(4);
    expect(bAgent.received.slice(0, beginAt).some((m) => m.upsert)).to.equal(false);
    expect(sb.fabric.map((o) => o.name)).to.deep.equal([
      'peer/n1/dpu-a',
      'prefix/10.244.0.64/26',
      'route/10.244.0.0/26',
      'vtep',
    ]);
    await waitUntil(() => fabricUpserts(a, from).length === 2, 'dpu-b told to dpu-a');
    expect(fabricUpserts(a, from).map((o) => [o.name, o.peer?.address ?? o.peerRoute?.peer])).to.deep.equal([
      ['peer/n1/dpu-b', '10.0.1.12'],
      ['route/10.244.0.64/26', 'peer/n1/dpu-b'],
    ]);
  });

  for (const [what, hello, why] of [
    [
      'a version 2 agent',
      v3Hello('dpu-old', { maxProtocolVersion: 2 }),
      'does not carry the fabric: protocol version 2',
    ],
    [
      'an agent without the fabric-vxlan feature',
      v3Hello('dpu-old', {
        capabilities: { maxPorts: 0, ipv6: true, minMtu: 68, maxMtu: 9216, features: [] },
      }),
      'does not carry the fabric: no fabric-vxlan feature',
    ],
    [
      'an agent that states no uplink',
      v3Hello('dpu-old', { uplinkAddresses: [] }),
      'does not carry the fabric: stated no uplink address',
    ],
  ] as const) {
    it(`gives ${what} no fabric object and says why it does not carry the fabric`, async () => {
      const b = rig.backend;
      await b.fabric.prepare(VXLAN_SETTINGS);
      await b.fabric.apply([n3], own({ 'dpu-old': ['10.244.0.0/26'] }));
      const a = connect(hello);
      const snap = await snapshot(a);
      expect(snap.end.syncComplete?.fabricCount).to.equal(0);
      await waitUntil(async () => (await b.health()).dpus?.[0]?.fabric !== undefined, 'its status');
      const row = (await b.health()).dpus?.find((d) => d.id === 'dpu-old');
      expect(row?.fabric?.carries).to.equal(false);
      expect(row?.fabric?.note).to.equal(why);
      expect(row?.reason, 'not a failure of the DPU').to.equal(undefined);
      await b.fabric.apply([n3, n4], own({ 'dpu-old': ['10.244.0.0/26'] }));
      // Ports still work: an unrelated message round trip shows nothing fabric arrived meanwhile.
      await new Promise((r) => setTimeout(r, 200));
      expect(
        a.received.filter((m) => m.upsert?.fabric || m.delete?.kind === ObjectKind.OBJECT_KIND_FABRIC),
      ).to.deep.equal([]);
      expect(b.fabric.local().endpoints).to.deep.equal([]);
      const report = b.fabric.report();
      expect(report.ready).to.equal(false);
      expect(report.reasons).to.deep.equal([
        `no healthy DPU agent carries the fabric (dpu-old: ${why.replace('does not carry the fabric: ', '')})`,
      ]);
      expect(report.peers.map((p) => [p.node, p.path])).to.deep.equal([
        ['n3', 'unreachable'],
        ['n4', 'unreachable'],
      ]);
    });
  }

  it('counts a refused fabric object as a reason naming the agent and the object', async () => {
    const b = rig.backend;
    await b.fabric.prepare(VXLAN_SETTINGS);
    await b.fabric.apply([n3], own({}));
    const a = connect(v3Hello('dpu-a'));
    const snap = await snapshot(a);
    for (const o of snap.fabric)
      a.send(
        o.name === 'peer/n3'
          ? fabricAck(o, { code: AckCode.ACK_CODE_NO_RESOURCES, message: 'FDB full' })
          : fabricAck(o),
      );
    await waitUntil(
      () => b.fabric.report().reasons.length === 1 && /could not/.test(b.fabric.report().reasons[0]!),
      'the refusal',
    );
    expect(b.fabric.report().reasons).to.deep.equal([
      'DPU agent dpu-a could not program 1 fabric objects (peer/n3: FDB full)',
    ]);
    // A refusal is the fabric's reason, not the node's: the DPU answered, its ports work.
    expect((await b.health()).ready).to.equal(true);
  });

  it('takes the PeerStatus of a 5,000-peer table without ending the stream', async function () {
    this.timeout(180_000);
    // PeerStatus lists every FabricPeer the agent holds, whole, after every change and every heartbeat:
    // at 5,000 peers it is some 300 KB, and a limit below that ended every session as soon as the agent
    // held its snapshot's peers (and with it every ack counted so far).
    const b = rig.backend;
    await b.fabric.prepare(VXLAN_SETTINGS);
    const peers: Peer[] = Array.from({ length: 5000 }, (_, i) => ({
      ...n3,
      node: `worker-${String(i).padStart(4, '0')}.rack-${Math.floor(i / 40)}.example.net`,
      underlay: [`10.1.${Math.floor(i / 250)}.${(i % 250) + 1}`],
      vtep: { mac: vtepMac(`10.1.${Math.floor(i / 250)}.${(i % 250) + 1}`), vni: 30574, port: 4789 },
      prefixes: [`10.${128 + Math.floor(i / 1024)}.${Math.floor((i % 1024) / 4)}.${(i % 4) * 64}/26`],
    }));
    await b.fabric.apply(peers, own({}));
    const a = connect(v3Hello('dpu-a'));
    // 10,001 objects: the time is the machine's load, not what is tested here.
    const snap = await snapshot(a, 0, 60_000);
    const held = snap.fabric.filter((o) => o.peer);
    expect(held).to.have.length(5000);
    const states: PeerState[] = held.map((o, i) => ({
      name: o.name,
      reachable: true,
      offloaded: true,
      txPackets: 1_000_000_000 + i,
      rxPackets: 2_000_000_000 + i,
      lastError: '',
    }));
    const status: AgentMessage = { peerStatus: { peers: states, delta: false, gone: [] } };
    const bytes = AgentMessageCodec.encode(AgentMessageCodec.fromPartial(status)).finish().length;
    expect(bytes, 'larger than the old 256 KiB limit').to.be.above(256 * 1024);
    a.send(status);
    await waitUntil(
      async () =>
        a.isEnded || (await b.health()).dpus?.find((d) => d.id === 'dpu-a')?.fabric?.peersReachable === 5000,
      'every peer reported reachable',
      60_000,
    );
    expect(a.isEnded, 'the stream stays').to.equal(false);
  });

  it('says of an agent message over the limit that the daemon refused it, with its size, in Status', async () => {
    // gRPC's own limit ended the call with nothing the session could read, and the daemon said "the
    // agent cancelled the stream" of a message it had refused itself.
    const b = rig.backend;
    const a = connect(v3Hello('dpu-a'));
    await a.next((m) => !!m.helloAccept, 'hello accepted');
    const huge: AgentMessage = {
      peerStatus: {
        peers: [
          {
            name: 'peer/n3',
            reachable: false,
            offloaded: false,
            txPackets: 0,
            rxPackets: 0,
            lastError: 'x'.repeat(5 * 1024 * 1024),
          },
        ],
        delta: false,
        gone: [],
      },
    };
    const bytes = AgentMessageCodec.encode(AgentMessageCodec.fromPartial(huge)).finish().length;
    a.send(huge);
    const end = await a.end(10_000);
    expect(end.code).to.equal(grpcStatus.RESOURCE_EXHAUSTED);
    const said = `the agent sent a message of ${bytes} bytes, over the limit of ${4 * 1024 * 1024} bytes`;
    await waitUntil(
      async () => ((await b.health()).dpus?.find((d) => d.id === 'dpu-a')?.reason ?? '').includes(said),
      'Status naming the refused message',
    );
  });

  it('shows a change of the table, a PeerStatus, an ack and a refusal at the next report, never a stale one', async () => {
    // The report and each agent's counts are kept between changes (at 5,000 peers Status rebuilt them
    // on every call): each of these must still show at once.
    const b = rig.backend;
    await b.fabric.prepare(VXLAN_SETTINGS);
    const a = connect(v3Hello('dpu-a'));
    await snapshot(a);
    let from = a.received.length;
    await b.fabric.apply([n3], own({}));
    await waitUntil(() => fabricUpserts(a, from).length === 3, 'three fabric upserts');
    const first = fabricUpserts(a, from);
    const peersOf = (): Array<[string, boolean | undefined]> =>
      b.fabric.report().peers.map((p) => [p.node, p.seenBy?.[0]?.reachable]);
    const row = async (): Promise<[number, number, number, number] | undefined> => {
      const f = (await b.health()).dpus?.find((d) => d.id === 'dpu-a')?.fabric;
      return f && [f.objectsAcked, f.objectsDesired, f.peersReachable, f.peersTotal];
    };
    expect(peersOf()).to.deep.equal([['n3', undefined]]);
    expect(await row()).to.deep.equal([0, 3, 0, 1]);

    for (const o of first) a.send(fabricAck(o));
    await waitUntil(() => b.fabric.report().ready, 'ready after the acks');
    expect(b.fabric.report().objects).to.deep.equal({ routes: 1, neighbours: 0, fdb: 1 });
    expect(await row()).to.deep.equal([3, 3, 0, 1]);

    const say = (reachable: boolean): void =>
      a.send({
        peerStatus: {
          peers: [
            { name: 'peer/n3', reachable, offloaded: false, txPackets: 0, rxPackets: 0, lastError: '' },
          ],
          delta: false,
          gone: [],
        },
      });
    say(true);
    await waitUntil(() => peersOf()[0]?.[1] === true, 'n3 reachable');
    expect(await row()).to.deep.equal([3, 3, 1, 1]);
    say(false);
    await waitUntil(() => peersOf()[0]?.[1] === false, 'n3 unreachable');
    expect(await row()).to.deep.equal([3, 3, 0, 1]);

    from = a.received.length;
    const n3Path = b.fabric.report().peers[0];
    const report = await b.fabric.apply([n3, n4], own({}));
    expect(report.peers.map((p) => p.node)).to.deep.equal(['n3', 'n4']);
    // n3's record, objects and PeerStatus did not move: its path is the one made before, not made again.
    expect(report.peers[0]).to.equal(n3Path);
    expect(report.peers[0]?.seenBy?.[0]?.reachable).to.equal(false);
    expect(report.ready).to.equal(false);
    expect(await row()).to.deep.equal([3, 5, 0, 2]);
    await waitUntil(() => fabricUpserts(a, from).length === 2, "n4's two objects");
    const [peer4, route4] = fabricUpserts(a, from).sort((x, y) => (x.name < y.name ? -1 : 1));
    a.send(fabricAck(peer4!));
    a.send(fabricAck(route4!, { code: AckCode.ACK_CODE_INVALID, message: 'no room' }));
    await waitUntil(
      () => b.fabric.report().reasons.some((r) => r.includes('could not program 1 fabric objects')),
      'the refusal as a reason',
    );
    expect(b.fabric.report().objects).to.deep.equal({ routes: 1, neighbours: 0, fdb: 2 });
    expect(await row()).to.deep.equal([4, 5, 0, 2]);

    await b.fabric.apply([n4], own({}));
    expect(b.fabric.report().peers.map((p) => p.node)).to.deep.equal(['n4']);
    expect(b.fabric.report().objects).to.deep.equal({ routes: 0, neighbours: 0, fdb: 1 });
    expect(await row()).to.deep.equal([2, 3, 0, 1]);
  });

  it('takes a PeerStatus of what changed only (peer-status-delta) on top of the last, and a new session starts with none', async () => {
    const b = rig.backend;
    await b.fabric.prepare(VXLAN_SETTINGS);
    const a = connect(v3Hello('dpu-a'));
    const accept = await a.next((m) => !!m.helloAccept, 'the accept');
    expect(accept.helloAccept?.capabilities?.features).to.include('peer-status-delta');
    await snapshot(a);
    // n4 has a DPU beside its own VXLAN device: two FabricPeers, peer/n4 and peer/n4/x.
    const n4x: Peer = {
      ...n4,
      endpoints: [
        {
          id: 'x',
          underlay: '10.0.0.44',
          mtu: 1500,
          vtep: { mac: vtepMac('10.0.0.44'), vni: 30574, port: 4789 },
          prefixes: [],
        },
      ],
    };
    await b.fabric.apply([n3, n4x], own({}));
    await waitUntil(() => fabricUpserts(a).some((o) => o.name === 'peer/n4/x'), 'peer/n4/x sent');
    const state = (name: string, reachable: boolean, txPackets = 0, lastError = ''): PeerState => ({
      name,
      reachable,
      offloaded: false,
      txPackets,
      rxPackets: 0,
      lastError,
    });
    const seen = (): Array<[string, boolean | undefined, number | undefined, string | undefined]> =>
      b.fabric
        .report()
        .peers.map((p) => [
          p.node,
          p.seenBy?.[0]?.reachable,
          p.seenBy?.[0]?.txPackets,
          p.seenBy?.[0]?.lastError,
        ]);
    const reachableCount = async (): Promise<number | undefined> =>
      (await b.health()).dpus?.find((d) => d.id === 'dpu-a')?.fabric?.peersReachable;

    a.send({
      peerStatus: { peers: [state('peer/n3', true, 5), state('peer/n4', true, 7)], delta: false, gone: [] },
    });
    await waitUntil(() => seen()[1]?.[1] === true, 'the whole PeerStatus');
    expect(seen()).to.deep.equal([
      ['n3', true, 5, ''],
      ['n4', true, 7, ''],
    ]);
    const n3Path = b.fabric.report().peers[0];

    // A delta naming n4 only: n3 stays as the whole one said, and keeps its path object.
    a.send({ peerStatus: { peers: [state('peer/n4', false, 9, 'no answer')], delta: true, gone: [] } });
    await waitUntil(() => seen()[1]?.[1] === false, 'the delta');
    expect(seen()).to.deep.equal([
      ['n3', true, 5, ''],
      ['n4', false, 9, 'peer/n4: no answer'],
    ]);
    expect(b.fabric.report().peers[0]).to.equal(n3Path);
    expect(await reachableCount()).to.equal(1);

    // A second endpoint of n4 joins its word; `gone` drops it again.
    a.send({
      peerStatus: { peers: [state('peer/n4/x', true, 1), state('peer/n4', true, 9)], delta: true, gone: [] },
    });
    await waitUntil(() => seen()[1]?.[2] === 10, 'both endpoints of n4 summed');
    expect(seen()[1]).to.deep.equal(['n4', true, 10, '']);
    a.send({ peerStatus: { peers: [], delta: true, gone: ['peer/n4/x', 'peer/never-held'] } });
    await waitUntil(() => seen()[1]?.[2] === 9, 'the gone endpoint dropped');
    expect(seen()).to.deep.equal([
      ['n3', true, 5, ''],
      ['n4', true, 9, ''],
    ]);
    expect(await reachableCount()).to.equal(2);

    // A whole PeerStatus again replaces everything: n3 is no longer reported.
    a.send({ peerStatus: { peers: [state('peer/n4', true, 11)], delta: false, gone: [] } });
    await waitUntil(() => seen()[0]?.[1] === undefined, 'n3 no longer reported');
    expect(seen()).to.deep.equal([
      ['n3', undefined, undefined, undefined],
      ['n4', true, 11, ''],
    ]);

    // A new session starts with nothing: its first delta stands on an empty book.
    a.close();
    const again = connect(v3Hello('dpu-a'));
    await snapshot(again);
    await waitUntil(() => seen()[1]?.[1] === undefined, "the old session's word forgotten");
    again.send({ peerStatus: { peers: [state('peer/n3', false)], delta: true, gone: [] } });
    await waitUntil(() => seen()[0]?.[1] === false, "the new session's delta");
    expect(seen()).to.deep.equal([
      ['n3', false, 0, ''],
      ['n4', undefined, undefined, undefined],
    ]);
  });
});
