import { expect } from 'chai';
import * as path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { DpuBackend } from '../../../backends/dpu';
import type { HolderRecord, StoredHolders } from '../../../backends/dpu/fabric-holders';
import { FabricPlanner, type PlanContext } from '../../../backends/dpu/fabric-planner';
import type { Peer } from '../../../core/peer-source';
import { removeDir, scratchDir, startBackend } from '../../support/dpu-fixtures';
import { ackEveryFabricObject, snapshot, v3Hello } from './fabric-stream';
import { RawAgent } from '../../support/raw-agent';
import { NO_OWN, VX, VXLAN_SETTINGS, n3 } from '../../support/fabric-fixtures';
import { waitUntil } from '../../support/sim-process';

// The incumbent keeps its FDB entry on the DPU across a daemon restart: the holders of an agent's plan
// are kept in the store and restored before its first plan, so a newcomer that sorts first and states
// the incumbent's VTEP MAC is left out of the first snapshot, as it would have been without the restart.

/** At n3's prefixes, from an address and a VTEP MAC of its own. */
const n4: Peer = { ...n3, node: 'n4', underlay: ['10.0.0.4'], vtep: { mac: '0e:77:0a:00:00:04', ...VX } };
/** Sorts before n3 and states its VTEP MAC, at an address of its own. */
const n0: Peer = { ...n3, node: 'n0', underlay: ['10.0.0.9'], prefixes: ['10.244.9.0/24'] };

/**
 * The record as the daemon's store keeps it: in the store's lmdb environment, in durable write
 * transactions, refused once the store is closed.
 */
class HolderStore implements HolderRecord {
  writes = 0;
  private closed = false;
  private readonly root: RootDatabase;
  private readonly meta: Database<unknown, string>;

  constructor(dir: string) {
    this.root = open({ path: path.join(dir, 'store.mdb'), overlappingSync: false, eventTurnBatching: false });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
  }

  fabricHolders(agentId: string): unknown {
    return this.meta.get(`dpuFabricHolders/${agentId}`);
  }

  async putFabricHolders(agentId: string, value: StoredHolders | undefined): Promise<void> {
    if (this.closed) throw new Error('the store is closed');
    this.writes++;
    const key = `dpuFabricHolders/${agentId}`;
    await this.root.transaction(() => void (value ? this.meta.put(key, value) : this.meta.remove(key)));
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.root.close();
  }
}

describe('DPU fabric: the holders of tunnel endpoint identities across a daemon restart', function () {
  this.timeout(30_000);
  let dir: string;
  let backend: DpuBackend | undefined;
  let store: HolderStore | undefined;
  const agents: RawAgent[] = [];

  beforeEach(() => {
    dir = scratchDir();
  });

  afterEach(async () => {
    await stopDaemon();
    removeDir(dir);
  });

  /** The daemon's start: the store, the backend, the fabric (before the first apply). */
  async function startDaemon(): Promise<DpuBackend> {
    const s = new HolderStore(dir);
    store = s;
    const b = await startBackend(dir, { nodeName: 'n1' });
    backend = b;
    b.fabric.keepHoldersIn(() => s);
    await b.fabric.prepare(VXLAN_SETTINGS);
    return b;
  }

  /** The daemon's stop, in its order: the store closes before the fabric stops. */
  async function stopDaemon(): Promise<void> {
    for (const a of agents.splice(0)) a.close();
    await store?.close();
    await backend?.fabric.stop();
    await backend?.stop();
    store = undefined;
    backend = undefined;
  }

  /** Connects an agent that acks OK every fabric object it is sent. */
  function connect(id: string): RawAgent {
    const a = new RawAgent(path.join(dir, 'agent.sock'));
    agents.push(a);
    a.send(v3Hello(id));
    a.keepAlive(100);
    return ackEveryFabricObject(a);
  }

  const storedHolder = (identity: string): string | undefined => {
    const pairs = (store?.fabricHolders('dpu-a') as StoredHolders | undefined)?.pairs ?? [];
    const i = pairs.findIndex((p, j) => j % 2 === 0 && p === identity);
    return i < 0 ? undefined : pairs[i + 1];
  };

  /** A daemon whose fabric has n3, acked by dpu-a, with n3 recorded as the holder of `identity`. */
  async function startHoldingN3(identity: string): Promise<Awaited<ReturnType<typeof startDaemon>>> {
    const b = await startDaemon();
    await b.fabric.apply([n3], NO_OWN);
    connect('dpu-a');
    await waitUntil(() => b.fabric.report().ready, 'dpu-a holds peer/n3');
    await waitUntil(() => storedHolder(identity) === 'peer/n3', 'the holders recorded');
    return b;
  }

  it("keeps the incumbent's FDB key when a newcomer that sorts first states its VTEP MAC after a restart", async () => {
    let b = await startHoldingN3('mac|0e:77:0a:00:00:03');

    await stopDaemon();
    b = await startDaemon();
    await b.fabric.apply([n0, n3], NO_OWN);
    const a = connect('dpu-a');
    const snap = await snapshot(a);
    const names = snap.fabric.map((o) => o.name);
    expect(names, 'the incumbent keeps its FabricPeer').to.include('peer/n3');
    expect(names, 'the newcomer is left out').to.not.include('peer/n0');
    const route = snap.fabric.find((o) => o.name === 'route/10.244.2.0/24');
    expect(route?.peerRoute?.peer).to.equal('peer/n3');
    expect(snap.fabric.find((o) => o.name === 'peer/n3')?.peer).to.include({
      address: '10.0.0.3',
      mac: '0e:77:0a:00:00:03',
    });
    const n0Path = b.fabric.report().peers.find((p) => p.node === 'n0');
    expect(n0Path?.path).to.equal('unreachable');
    expect(n0Path?.reason).to.equal('peer/n0 states a VTEP MAC or address that peer/n3 holds');
  });

  it('writes the holders only when one of them changes', async () => {
    const b = await startHoldingN3('address|10.0.0.3');
    const writes = store!.writes;
    // Another prefix and MTU of n3, and the same table again: no identity changes hands.
    await b.fabric.apply([{ ...n3, prefixes: ['10.244.2.0/24', '10.244.12.0/24'], mtu: 9000 }], NO_OWN);
    await b.fabric.apply([{ ...n3, prefixes: ['10.244.2.0/24', '10.244.12.0/24'], mtu: 9000 }], NO_OWN);
    await new Promise((r) => setTimeout(r, 1500));
    expect(store!.writes, 'nothing written').to.equal(writes);
    await b.fabric.apply([n3, n4], NO_OWN);
    await waitUntil(() => storedHolder('address|10.0.0.4') === 'peer/n4', 'n4 recorded');
    expect(store!.writes).to.equal(writes + 1);
  });

  it("starts a planner from the holders it is given: a newcomer named first does not take the incumbent's MAC", () => {
    const context: PlanContext = {
      node: 'n1',
      agent: { id: 'dpu-a', address: '10.0.1.11', uplinkMtu: 1500 },
      locals: [{ id: 'dpu-a', address: '10.0.1.11', uplinkMtu: 1500 }],
      own: NO_OWN,
      settings: VX,
    };
    const before = new FabricPlanner();
    before.update(context, [n3]);
    const restarted = new FabricPlanner(new Map(before.holders));
    const plan = restarted.update(context, [n0, n3]);
    expect(plan.has('peer/n0')).to.equal(false);
    expect(plan.get('peer/n3')?.peer?.mac).to.equal('0e:77:0a:00:00:03');
    expect(Object.fromEntries(restarted.refused)).to.deep.equal({ 'peer/n0': 'peer/n3' });
    expect(restarted.holdersChanged, 'the holders are those it was given').to.equal(false);
  });
});
