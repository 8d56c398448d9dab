import { expect } from 'chai';
import { AckCode, ObjectKind, type AgentMessage } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { ackEveryFabricObject, fabricAck, fabricUpserts, snapshot, v3Hello } from './fabric-stream';
import { RawAgent } from '../../support/raw-agent';
import { rawAgentBackend } from '../../support/raw-agent-backend';
import { NO_OWN, VXLAN_SETTINGS, n3, n4 } from '../../support/fabric-fixtures';
import { waitUntil } from '../../support/sim-process';

// One endpoint, one holder: a DPU may carry the fabric only at an address no other node and no other
// DPU of this node already has. The holder keeps it; the newcomer serves ports, says why, and carries
// the fabric the moment the holder is gone. And an object an agent refused for what another held is
// sent again right behind the change that may have freed it, not at the next snapshot.

describe('DPU backend: one tunnel endpoint, one holder', function () {
  this.timeout(30_000);
  const rig = rawAgentBackend({ backend: () => ({ nodeName: 'n1' }), fabric: VXLAN_SETTINGS });

  /** Connects an agent that acks OK every fabric object it is sent, now and later. */
  function connect(hello: AgentMessage, ackEverything = true): RawAgent {
    const a = rig.connect(hello);
    return ackEverything ? ackEveryFabricObject(a) : a;
  }

  const row = async (id: string): Promise<{ carries?: boolean; note?: string } | undefined> =>
    (await rig.backend.health()).dpus?.find((d) => d.id === id)?.fabric;
  const endpointIds = (): string[] => (rig.backend.fabric.local().endpoints ?? []).map((e) => e.id);

  it("refuses a DPU stating another node's underlay address, says why, and admits it the moment that node leaves", async () => {
    await rig.backend.fabric.apply([n3], NO_OWN);
    const a = connect(v3Hello('dpu-a'));
    await snapshot(a);
    await waitUntil(() => rig.backend.fabric.report().ready, 'dpu-a holds its fabric');
    const fromA = a.received.length;

    const rogue = connect(v3Hello('dpu-rogue', { uplinkAddresses: ['10.0.0.3'] }));
    const snap = await snapshot(rogue);
    expect(snap.end.syncComplete?.fabricCount, 'no fabric object for it').to.equal(0);
    await waitUntil(async () => (await row('dpu-rogue'))?.carries === false, 'its row');
    expect((await row('dpu-rogue'))?.note).to.match(
      /refused: its uplink address 10\.0\.0\.3 is node n3's underlay address/,
    );
    expect(endpointIds(), 'not an endpoint of this node').to.deep.equal(['dpu-a']);
    await new Promise((r) => setTimeout(r, 200));
    expect(
      fabricUpserts(a, fromA).map((o) => o.name),
      'dpu-a is told nothing of it',
    ).to.deep.equal([]);
    const report = rig.backend.fabric.report();
    expect(report.ready, report.reasons.join('; ')).to.equal(true);

    // n3 leaves the table: nothing holds the address any more, and the DPU carries the fabric at once.
    const fromRogue = rogue.received.length;
    await rig.backend.fabric.apply([n4], NO_OWN);
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
    await waitUntil(() => rig.backend.fabric.report().ready, 'ready with both');
  });

  it('keeps the first DPU at an address; others stating it are refused and the fabric stays ready, until the first moves away', async () => {
    await rig.backend.fabric.apply([n3], NO_OWN);
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
    await waitUntil(() => rig.backend.fabric.report().ready, 'ready: dpu-a holds its fabric');
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
    await waitUntil(() => rig.backend.fabric.report().ready, 'ready with dpu-a and dpu-b');
  });

  it('checks a DPU admitted before the first table against it: the node of the table keeps its address', async () => {
    const rogue = connect(v3Hello('dpu-rogue', { uplinkAddresses: ['10.0.0.3'] }));
    await snapshot(rogue);
    await waitUntil(() => endpointIds().includes('dpu-rogue'), 'admitted while no table is known');
    await rig.backend.fabric.apply([n3], NO_OWN);
    expect(endpointIds()).to.deep.equal([]);
    expect((await row('dpu-rogue'))?.note).to.match(/10\.0\.0\.3 is node n3's underlay address/);
  });

  it('sends an object the agent refused for another one again right behind the change that freed it', async () => {
    await rig.backend.fabric.apply([n3, n4], NO_OWN);
    const a = connect(v3Hello('dpu-a'), false);
    const snap = await snapshot(a);
    const blocked = snap.fabric.find((o) => o.name === 'peer/n4')!;
    const why = 'fdb 0e:77:0a:00:00:04 dst 10.0.0.4 is already programmed for peer/n3';
    for (const o of snap.fabric)
      a.send(o === blocked ? fabricAck(o, { code: AckCode.ACK_CODE_INVALID, message: why }) : fabricAck(o));
    await waitUntil(() => rig.backend.fabric.report().reasons.some((r) => r.includes(why)), 'the refusal');

    // A change that frees nothing (n4 states another MTU) does not send it again.
    const from = a.received.length;
    await rig.backend.fabric.apply([n3, { ...n4, mtu: 9000 }], NO_OWN);
    await new Promise((r) => setTimeout(r, 200));
    expect(fabricUpserts(a, from)).to.deep.equal([]);

    // n3 leaves: its objects are deleted, and peer/n4 goes again right behind, at a new generation.
    await rig.backend.fabric.apply([n4], NO_OWN);
    const again = await a.next((m) => m.upsert?.fabric?.name === 'peer/n4', 'peer/n4 again', 5000, from);
    const at = a.received.indexOf(again);
    const deleted = a.received
      .slice(from, at)
      .filter((m) => m.delete?.kind === ObjectKind.OBJECT_KIND_FABRIC)
      .map((m) => m.delete?.name);
    expect(deleted, 'after the deletes that freed it').to.include('peer/n3');
    expect(again.upsert?.fabric?.generation).to.be.greaterThan(blocked.generation);
    expect(again.upsert?.fabric?.peer).to.deep.equal(blocked.peer);
    expect(rig.backend.fabric.report().ready, 'waiting for its ack').to.equal(false);
    for (const m of a.received.slice(from)) {
      if (m.upsert?.fabric) a.send(fabricAck(m.upsert.fabric));
      if (m.delete?.kind === ObjectKind.OBJECT_KIND_FABRIC)
        a.send(fabricAck({ name: m.delete.name, generation: m.delete.generation }));
    }
    await waitUntil(() => rig.backend.fabric.report().ready, 'ready once it is acked');
  });
});
