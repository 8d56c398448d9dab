import { expect } from 'chai';
import { endpointClash } from '../../../backends/dpu/endpoint-clash';
import { planFabric, type FabricAgent } from '../../../backends/dpu/fabric-plan';
import type { FabricSettings } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { dpuVtepMac, vtepMac } from '../../../lib/vtep-mac';
import { ackEveryFabricObject, fabricUpserts, snapshot, v3Hello } from './fabric-stream';
import { RawAgent } from '../../support/raw-agent';
import { rawAgentBackend } from '../../support/raw-agent-backend';
import { NO_OWN, VX } from '../../support/fabric-fixtures';
import { waitUntil } from '../../support/sim-process';

// With a source that publishes records (the fabric settings carry the node's name), a DPU's VTEP MAC
// is derived from "<node>/<agent id>" and its address: two DPUs of different nodes at one address (two
// underlays) have different MACs and both carry the fabric, where a MAC of the address alone made one
// take the other's FDB entry. A MAC another node states is still refused in words, and the incumbent
// keeps it. Without a name (the static source) the MAC is the address's, as the peers files list it.

const NAMED: FabricSettings = { mode: 'vxlan', nodeIp: '', ...VX, clusterCidrs: [], nodeName: 'n1' };
const a: FabricAgent = { id: 'dpu-a', address: '10.0.1.11', uplinkMtu: 1500 };
const dpuNode = (node: string, id: string, address: string, mac: string): Peer => ({
  node,
  underlay: ['10.0.0.99'],
  mtu: 1500,
  bootId: 'b',
  prefixes: [`10.244.${node.slice(1)}.0/24`],
  endpoints: [
    { id, underlay: address, mtu: 1500, vtep: { mac, ...VX }, prefixes: [`10.244.${node.slice(1)}.0/24`] },
  ],
});
/** On another underlay, its DPU at the address n1's dpu-a has. */
const n2 = dpuNode('n2', 'dpu-x', '10.0.1.11', dpuVtepMac('10.0.1.11', 'n2', 'dpu-x'));
/** Its DPU states the MAC n1's dpu-rogue derives at 10.0.1.31, at an address of its own. */
const ROGUE_MAC = dpuVtepMac('10.0.1.31', 'n1', 'dpu-rogue');
const n5 = dpuNode('n5', 'dpu-z', '10.0.5.11', ROGUE_MAC);
const n3: Peer = {
  node: 'n3',
  underlay: ['10.0.0.3'],
  mtu: 1500,
  bootId: 'b3',
  vtep: { mac: vtepMac('10.0.0.3', 'n3'), ...VX },
  prefixes: ['10.244.30.0/24'],
};

describe('DPU VTEP MAC: derived from the node name, the agent id and the address', () => {
  it('differs between two DPUs of different nodes at one address, and is the address alone unnamed', () => {
    expect(dpuVtepMac('10.0.1.11', 'n1', 'dpu-a')).to.not.equal(dpuVtepMac('10.0.1.11', 'n2', 'dpu-x'));
    expect(dpuVtepMac('10.0.1.11', 'n1', 'dpu-a')).to.not.equal(dpuVtepMac('10.0.1.11', 'n1', 'dpu-b'));
    expect(dpuVtepMac('10.0.1.11', 'n1', 'dpu-a'), 'the same after a restart').to.equal(
      dpuVtepMac('10.0.1.11', 'n1', 'dpu-a'),
    );
    expect(dpuVtepMac('10.0.1.11', undefined, 'dpu-a')).to.equal('0e:77:0a:00:01:0b');
  });

  it('lets a DPU carry the fabric at the address of another node or its DPU, once MACs are named', () => {
    expect(endpointClash(a, 'n1', [], [n2], 'n1')).to.equal(undefined);
    expect(endpointClash(a, 'n1', [], [{ ...n3, underlay: ['10.0.1.11'] }], 'n1')).to.equal(undefined);
    expect(endpointClash(a, 'n1', [], [n2]), 'unnamed, the address is the MAC').to.equal(
      "its uplink address 10.0.1.11 is the VTEP of node n2's DPU dpu-x",
    );
  });

  it('refuses a named DPU whose MAC another node states, and one at the address of a DPU of this node', () => {
    const rogue: FabricAgent = { id: 'dpu-rogue', address: '10.0.1.31', uplinkMtu: 1500 };
    expect(endpointClash(rogue, 'n1', [], [n5], 'n1')).to.equal(
      `its VTEP MAC ${ROGUE_MAC} (derived from n1/dpu-rogue at 10.0.1.31) is that of node n5's DPU dpu-z`,
    );
    const asVtep: Peer = { ...n3, vtep: { mac: ROGUE_MAC, ...VX } };
    expect(endpointClash(rogue, 'n1', [], [asVtep], 'n1')).to.match(/is node n3's VTEP MAC$/);
    expect(endpointClash({ ...rogue, address: '10.0.1.11' }, 'n1', [a], [], 'n1')).to.equal(
      'its uplink address 10.0.1.11 is already the VTEP of DPU agent dpu-a of this node',
    );
  });

  it("plans the agent's VTEP and the DPUs beside it with named MACs, a remote one's as its record states", () => {
    const b: FabricAgent = { id: 'dpu-b', address: '10.0.1.12', uplinkMtu: 1500 };
    const plan = planFabric({
      node: 'n1',
      agent: a,
      locals: [a, b],
      peers: [n5],
      own: NO_OWN,
      settings: NAMED,
    });
    expect(plan.get('vtep')?.localVtep?.mac).to.equal(dpuVtepMac('10.0.1.11', 'n1', 'dpu-a'));
    expect(plan.get('peer/n1/dpu-b')?.peer?.mac).to.equal(dpuVtepMac('10.0.1.12', 'n1', 'dpu-b'));
    expect(plan.get('peer/n5/dpu-z')?.peer?.mac).to.equal(ROGUE_MAC);
  });
});

describe('DPU backend: named VTEP MACs, one holder per MAC', function () {
  this.timeout(30_000);
  const rig = rawAgentBackend({ backend: () => ({ nodeName: 'n1' }), fabric: NAMED });

  /** Connects an agent that acks OK every fabric object it is sent. */
  const connect = (id: string, address = '10.0.1.11'): RawAgent =>
    ackEveryFabricObject(rig.connect(v3Hello(id, { uplinkAddresses: [address] })));

  const row = async (id: string): Promise<{ carries?: boolean; note?: string } | undefined> =>
    (await rig.backend.health()).dpus?.find((d) => d.id === id)?.fabric;

  it("carries the fabric on a DPU at the address of another node's DPU, each with its own MAC", async () => {
    await rig.backend.fabric.apply([n2, n3], NO_OWN);
    const x = connect('dpu-a');
    const snap = await snapshot(x);
    await waitUntil(() => rig.backend.fabric.report().ready, 'dpu-a holds its fabric');
    expect((await row('dpu-a'))?.carries).to.equal(true);
    const [mine] = rig.backend.fabric.local().endpoints ?? [];
    expect([mine?.id, mine?.underlay]).to.deep.equal(['dpu-a', '10.0.1.11']);
    expect(mine?.vtep.mac).to.equal(dpuVtepMac('10.0.1.11', 'n1', 'dpu-a'));
    expect(mine?.vtep.mac).to.not.equal(n2.endpoints?.[0]?.vtep.mac);
    expect(snap.fabric.find((o) => o.name === 'vtep')?.localVtep?.mac, 'programmed as published').to.equal(
      mine?.vtep.mac,
    );
    // On its own DPU its VTEP holds the address: n2's DPU is not reachable from it, and Status says why.
    const n2Path = rig.backend.fabric.report().peers.find((p) => p.node === 'n2');
    expect(n2Path?.path).to.equal('unreachable');
    expect(n2Path?.reason).to.equal('peer/n2/dpu-x states a VTEP MAC or address that vtep holds');
  });

  it("refuses a DPU whose VTEP MAC another node's DPU states, says why, and admits it once that node leaves", async () => {
    await rig.backend.fabric.apply([n3, n5], NO_OWN);
    const x = connect('dpu-a');
    await snapshot(x);
    await waitUntil(() => rig.backend.fabric.report().ready, 'dpu-a holds its fabric');
    const rogue = connect('dpu-rogue', '10.0.1.31');
    const snap = await snapshot(rogue);
    expect(snap.end.syncComplete?.fabricCount, 'no fabric object for it').to.equal(0);
    await waitUntil(async () => (await row('dpu-rogue'))?.carries === false, 'its row');
    expect((await row('dpu-rogue'))?.note).to.include(
      `refused: its VTEP MAC ${ROGUE_MAC} (derived from n1/dpu-rogue at 10.0.1.31) is that of node n5's DPU dpu-z`,
    );
    const fromRogue = rogue.received.length;
    await rig.backend.fabric.apply([n3], NO_OWN);
    expect((rig.backend.fabric.local().endpoints ?? []).map((e) => e.id)).to.deep.equal([
      'dpu-a',
      'dpu-rogue',
    ]);
    await waitUntil(
      () => fabricUpserts(rogue, fromRogue).some((o) => o.name === 'vtep'),
      'its VTEP sent without a new snapshot',
    );
    expect((await row('dpu-rogue'))?.carries).to.equal(true);
  });
});
