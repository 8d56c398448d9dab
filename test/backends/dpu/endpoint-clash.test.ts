import { expect } from 'chai';
import * as path from 'node:path';
import type { DpuBackend } from '../../../backends/dpu';
import type { FabricSettings, OwnPrefixes } from '../../../core/fabric/fabric-dataplane';
import type { Peer } from '../../../core/fabric/peer-source';
import { endpointClash } from '../../../backends/dpu/endpoint-clash';
import { dpuVtepMac } from '../../../lib/vtep-mac';
import { AckCode, ObjectKind, type AgentMessage } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { removeDir, scratchDir, startBackend } from './fixtures';
import { fabricAck, fabricUpserts, snapshot, v3Hello } from './fabric-stream';
import { RawAgent } from './raw-agent';
import { waitUntil } from './sim-process';

// One endpoint, one holder: a DPU may carry the fabric only with a VTEP MAC no other node states and at
// an address no other DPU of this node has. The holder keeps it; the newcomer serves ports, says why,
// and carries the fabric the moment the holder is gone. Another node at the same address is on another
// underlay: its MAC differs (it is derived from the node's name and the agent's id too), and both
// carry the fabric. And an object an agent refused for what another held is sent again right behind
// the change that may have freed it, not at the next snapshot.

const SETTINGS: FabricSettings = { mode: 'vxlan', nodeIp: '', vni: 30574, port: 4789, clusterCidrs: [] };
const n3: Peer = {
  node: 'n3',
  underlay: ['10.0.0.3'],
  mtu: 1500,
  bootId: 'b3',
  vtep: { mac: '0e:77:0a:00:00:03', vni: 30574, port: 4789 },
  prefixes: ['10.244.2.0/24'],
};
const n4: Peer = {
  ...n3,
  node: 'n4',
  underlay: ['10.0.0.4'],
  vtep: { mac: '0e:77:0a:00:00:04', vni: 30574, port: 4789 },
  prefixes: ['10.244.3.0/24'],
};
const NO_OWN: OwnPrefixes = { ranges: [], byEndpoint: new Map() };
/** A DPU node whose DPU dpu-z states the VTEP MAC n1's dpu-rogue derives at 10.0.1.31. */
const ROGUE_MAC = dpuVtepMac('10.0.1.31', 'n1', 'dpu-rogue');
const n5: Peer = {
  node: 'n5',
  underlay: ['10.0.0.5'],
  mtu: 1500,
  bootId: 'b5',
  prefixes: ['10.244.5.0/24'],
  endpoints: [
    {
      id: 'dpu-z',
      underlay: '10.0.5.11',
      mtu: 1500,
      vtep: { mac: ROGUE_MAC, vni: 30574, port: 4789 },
      prefixes: ['10.244.5.0/24'],
    },
  ],
};
/** A DPU node on another underlay whose DPU has the address n1's dpu-a has (10.0.1.11). */
const n2: Peer = {
  node: 'n2',
  underlay: ['10.0.0.2'],
  mtu: 1500,
  bootId: 'b2',
  prefixes: ['10.244.1.0/24'],
  endpoints: [
    {
      id: 'dpu-x',
      underlay: '10.0.1.11',
      mtu: 1500,
      vtep: { mac: dpuVtepMac('10.0.1.11', 'n2', 'dpu-x'), vni: 30574, port: 4789 },
      prefixes: ['10.244.1.0/24'],
    },
  ],
};

describe('DPU endpoint clash: what takes a tunnel endpoint', () => {
  const a = { id: 'dpu-a', address: '10.0.1.11', uplinkMtu: 1500 };

  it('lets two DPUs of different nodes have one address: their MACs differ', () => {
    expect(endpointClash(a, 'n1', [], [n2])).to.equal(undefined);
    expect(endpointClash(a, 'n1', [], [{ ...n3, underlay: ['10.0.1.11'] }])).to.equal(undefined);
    expect(dpuVtepMac('10.0.1.11', 'n1', 'dpu-a')).to.not.equal(n2.endpoints?.[0]?.vtep.mac);
  });

  it('refuses a DPU whose MAC another node states, and one at the address of a DPU of this node', () => {
    const rogue = { id: 'dpu-rogue', address: '10.0.1.31', uplinkMtu: 1500 };
    expect(endpointClash(rogue, 'n1', [], [n5])).to.equal(
      `its VTEP MAC ${ROGUE_MAC} (derived from n1/dpu-rogue at 10.0.1.31) is that of node n5's DPU dpu-z`,
    );
    const asVtep = { ...n3, vtep: { mac: ROGUE_MAC, vni: 30574, port: 4789 } };
    expect(endpointClash(rogue, 'n1', [], [asVtep])).to.match(/is node n3's VTEP MAC/);
    expect(endpointClash({ ...rogue, address: '10.0.1.11' }, 'n1', [a], [])).to.equal(
      'its uplink address 10.0.1.11 is already the VTEP of DPU agent dpu-a of this node',
    );
  });
});

describe('DPU backend: one tunnel endpoint, one holder', function () {
  this.timeout(30_000);
  let dir: string;
  let backend: DpuBackend;
  const agents: RawAgent[] = [];

  beforeEach(async () => {
    dir = scratchDir();
    backend = await startBackend(dir, { nodeName: 'n1' });
    await backend.fabric.prepare(SETTINGS);
  });

  afterEach(async () => {
    for (const a of agents.splice(0)) a.close();
    await backend.stop();
    removeDir(dir);
  });

  /** Connects an agent that acks OK every fabric object it is sent, now and later. */
  function connect(hello: AgentMessage, ackEverything = true): RawAgent {
    const a = new RawAgent(path.join(dir, 'agent.sock'));
    agents.push(a);
    a.send(hello);
    a.keepAlive(100);
    if (ackEverything) {
      let acked = 0;
      const t = setInterval(() => {
        if (a.isEnded) return clearInterval(t);
        for (; acked < a.received.length; acked++) {
          const o = a.received[acked]?.upsert?.fabric;
          if (o) a.send(fabricAck(o));
        }
      }, 20);
    }
    return a;
  }

  const row = async (id: string): Promise<{ carries?: boolean; note?: string } | undefined> =>
    (await backend.health()).dpus?.find((d) => d.id === id)?.fabric;
  const endpointIds = (): string[] => (backend.fabric.local().endpoints ?? []).map((e) => e.id);

  it("carries the fabric on a DPU at the address of another node's DPU, each with its own MAC", async () => {
    await backend.fabric.apply([n2, n3], NO_OWN);
    const a = connect(v3Hello('dpu-a'));
    await snapshot(a);
    await waitUntil(() => backend.fabric.report().ready, 'dpu-a holds its fabric');
    expect((await row('dpu-a'))?.carries).to.equal(true);
    const [mine] = backend.fabric.local().endpoints ?? [];
    expect([mine?.id, mine?.underlay]).to.deep.equal(['dpu-a', '10.0.1.11']);
    expect(mine?.vtep.mac).to.equal(dpuVtepMac('10.0.1.11', 'n1', 'dpu-a'));
    expect(mine?.vtep.mac).to.not.equal(n2.endpoints?.[0]?.vtep.mac);
    // Its own VTEP holds the address on its DPU: n2's DPU is not reachable from it, and says why.
    const n2Path = backend.fabric.report().peers.find((p) => p.node === 'n2');
    expect(n2Path?.path).to.equal('unreachable');
    expect(n2Path?.reason).to.equal('peer/n2/dpu-x states a VTEP MAC or address that vtep holds');
  });

  it("refuses a DPU whose VTEP MAC another node's DPU states, says why, and admits it the moment that node leaves", async () => {
    await backend.fabric.apply([n3, n5], NO_OWN);
    const a = connect(v3Hello('dpu-a'));
    await snapshot(a);
    await waitUntil(() => backend.fabric.report().ready, 'dpu-a holds its fabric');
    const fromA = a.received.length;

    const rogue = connect(v3Hello('dpu-rogue', { uplinkAddresses: ['10.0.1.31'] }));
    const snap = await snapshot(rogue);
    expect(snap.end.syncComplete?.fabricCount, 'no fabric object for it').to.equal(0);
    await waitUntil(async () => (await row('dpu-rogue'))?.carries === false, 'its row');
    expect((await row('dpu-rogue'))?.note).to.include(
      `refused: its VTEP MAC ${ROGUE_MAC} (derived from n1/dpu-rogue at 10.0.1.31) is that of node n5's DPU dpu-z`,
    );
    expect(endpointIds(), 'not an endpoint of this node').to.deep.equal(['dpu-a']);
    await new Promise((r) => setTimeout(r, 200));
    expect(
      fabricUpserts(a, fromA).map((o) => o.name),
      'dpu-a is told nothing of it',
    ).to.deep.equal([]);
    const report = backend.fabric.report();
    expect(report.ready, report.reasons.join('; ')).to.equal(true);

    // n5 leaves the table: nothing holds the MAC any more, and the DPU carries the fabric at once.
    const fromRogue = rogue.received.length;
    await backend.fabric.apply([n3, n4], NO_OWN);
    expect(endpointIds()).to.deep.equal(['dpu-a', 'dpu-rogue']);
    await waitUntil(
      () => fabricUpserts(rogue, fromRogue).some((o) => o.name === 'vtep'),
      'its VTEP sent without a new snapshot',
    );
    await waitUntil(
      () => fabricUpserts(a, fromA).some((o) => o.name === 'peer/n1/dpu-rogue'),
      'dpu-a told of it',
    );
    expect((await row('dpu-rogue'))?.carries).to.equal(true);
    await waitUntil(() => backend.fabric.report().ready, 'ready with both');
  });

  it('keeps the first DPU at an address; others stating it are refused and the fabric stays ready, until the first moves away', async () => {
    await backend.fabric.apply([n3], NO_OWN);
    const a = connect(v3Hello('dpu-a'));
    await snapshot(a);
    const b = connect(v3Hello('dpu-b'));
    const c = connect(v3Hello('dpu-c'));
    await snapshot(b);
    await snapshot(c);
    for (const id of ['dpu-b', 'dpu-c']) {
      await waitUntil(async () => (await row(id))?.carries === false, `${id}'s row`);
      expect((await row(id))?.note).to.match(
        /10\.0\.1\.11 is already the VTEP of DPU agent dpu-a of this node/,
      );
    }
    await waitUntil(() => backend.fabric.report().ready, 'ready: dpu-a holds its fabric');
    expect(endpointIds()).to.deep.equal(['dpu-a']);

    // dpu-a comes back at another address: the first one waiting is admitted at once, the other waits on.
    a.close();
    const fromB = b.received.length;
    const moved = connect(v3Hello('dpu-a', { uplinkAddresses: ['10.0.1.21'], bootId: 'boot-2' }));
    await snapshot(moved);
    await waitUntil(() => endpointIds().includes('dpu-b'), 'dpu-b admitted');
    expect(endpointIds()).to.deep.equal(['dpu-a', 'dpu-b']);
    await waitUntil(() => fabricUpserts(b, fromB).some((o) => o.name === 'vtep'), "dpu-b's VTEP sent");
    expect((await row('dpu-c'))?.note).to.match(/already the VTEP of DPU agent dpu-b of this node/);
    await waitUntil(() => backend.fabric.report().ready, 'ready with dpu-a and dpu-b');
  });

  it('checks a DPU admitted before the first table against it: the node of the table keeps its MAC', async () => {
    const rogue = connect(v3Hello('dpu-rogue', { uplinkAddresses: ['10.0.1.31'] }));
    await snapshot(rogue);
    await waitUntil(() => endpointIds().includes('dpu-rogue'), 'admitted while no table is known');
    await backend.fabric.apply([n5], NO_OWN);
    expect(endpointIds()).to.deep.equal([]);
    expect((await row('dpu-rogue'))?.note).to.include(`is that of node n5's DPU dpu-z`);
  });

  it('sends an object the agent refused for another one again right behind the change that freed it', async () => {
    await backend.fabric.apply([n3, n4], NO_OWN);
    const a = connect(v3Hello('dpu-a'), false);
    const snap = await snapshot(a);
    const blocked = snap.fabric.find((o) => o.name === 'peer/n4')!;
    const why = 'fdb 0e:77:0a:00:00:04 dst 10.0.0.4 is already programmed for peer/n3';
    for (const o of snap.fabric)
      a.send(o === blocked ? fabricAck(o, { code: AckCode.ACK_CODE_INVALID, message: why }) : fabricAck(o));
    await waitUntil(() => backend.fabric.report().reasons.some((r) => r.includes(why)), 'the refusal');

    // A change that frees nothing (n4 states another MTU) does not send it again.
    const from = a.received.length;
    await backend.fabric.apply([n3, { ...n4, mtu: 9000 }], NO_OWN);
    await new Promise((r) => setTimeout(r, 200));
    expect(fabricUpserts(a, from)).to.deep.equal([]);

    // n3 leaves: its objects are deleted, and peer/n4 goes again right behind, at a new generation.
    await backend.fabric.apply([n4], NO_OWN);
    const again = await a.next((m) => m.upsert?.fabric?.name === 'peer/n4', 'peer/n4 again', 5000, from);
    const at = a.received.indexOf(again);
    const deleted = a.received
      .slice(from, at)
      .filter((m) => m.delete?.kind === ObjectKind.OBJECT_KIND_FABRIC)
      .map((m) => m.delete?.name);
    expect(deleted, 'after the deletes that freed it').to.include('peer/n3');
    expect(again.upsert?.fabric?.generation).to.be.greaterThan(blocked.generation);
    expect(again.upsert?.fabric?.peer).to.deep.equal(blocked.peer);
    expect(backend.fabric.report().ready, 'waiting for its ack').to.equal(false);
    for (const m of a.received.slice(from)) {
      if (m.upsert?.fabric) a.send(fabricAck(m.upsert.fabric));
      if (m.delete?.kind === ObjectKind.OBJECT_KIND_FABRIC)
        a.send(fabricAck({ name: m.delete.name, generation: m.delete.generation }));
    }
    await waitUntil(() => backend.fabric.report().ready, 'ready once it is acked');
  });
});
