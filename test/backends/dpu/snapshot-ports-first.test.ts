import { expect } from 'chai';
import * as path from 'node:path';
import type { DpuBackend } from '../../../backends/dpu';
import type { FabricSettings } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import type { ControllerMessage } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { attachTo } from '../../support/attach-spec';
import { fabricAck, fabricUpserts, v3Hello } from './fabric-stream';
import { okAck, removeDir, scratchDir, spec, startBackend } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';
import { waitUntil } from '../../support/sim-process';

// A reconnecting agent with ports and fabric objects gets its ports first, in a snapshot of their own:
// a rebooted DPU programs its VFs (and the daemon moves them back) before it works through thousands
// of fabric objects. The whole snapshot follows once those ports are acked.

const SETTINGS: FabricSettings = { mode: 'vxlan', nodeIp: '', vni: 30574, port: 4789, clusterCidrs: [] };
const n3: Peer = {
  node: 'n3',
  underlay: ['10.0.0.3'],
  mtu: 1500,
  bootId: 'b3',
  vtep: { mac: '0e:77:0a:00:00:03', vni: 30574, port: 4789 },
  prefixes: ['10.244.2.0/24'],
};

describe('DPU backend: a reconnect sends the ports before the fabric objects', function () {
  this.timeout(30_000);
  let dir: string;
  let backend: DpuBackend | undefined;
  const agents: RawAgent[] = [];

  beforeEach(async () => {
    dir = scratchDir();
    backend = await startBackend(dir, { nodeName: 'n1' });
  });

  afterEach(async () => {
    for (const a of agents.splice(0)) a.close();
    await backend?.stop();
    backend = undefined;
    removeDir(dir);
  });

  function connect(boot: string): RawAgent {
    const a = new RawAgent(path.join(dir, 'agent.sock'));
    agents.push(a);
    a.send(v3Hello('dpu-a', { bootId: boot }));
    a.keepAlive(100);
    return a;
  }

  /** The messages of the snapshot beginning at index `from`, up to its SyncComplete. */
  async function snapshotAt(a: RawAgent, from: number): Promise<{ msgs: ControllerMessage[]; next: number }> {
    const begin = await a.next((m) => !!m.snapshotBegin, 'a snapshot', 5000, from);
    const start = a.received.indexOf(begin);
    const end = await a.next((m) => !!m.syncComplete, 'its sync complete', 5000, start);
    const stop = a.received.indexOf(end);
    return { msgs: a.received.slice(start, stop + 1), next: stop + 1 };
  }

  it('lists the ports alone first, and the fabric objects only once the ports are acked', async () => {
    const b = backend!;
    await b.fabric.prepare(SETTINGS);
    const a1 = connect('boot-1');
    await a1.next((m) => !!m.syncComplete, 'the first snapshot');
    // The agent acks every port it is sent, so that Attach completes.
    const acker = setInterval(() => {
      for (const m of a1.received.splice(0))
        if (m.upsert?.port) a1.send(okAck(m.upsert.port.name, m.upsert.port.generation));
        else if (m.upsert?.fabric) a1.send(fabricAck(m.upsert.fabric));
    }, 20);
    try {
      await attachTo(b, spec(1));
      await b.fabric.apply([n3], {
        ranges: ['10.244.0.0/24'],
        byEndpoint: new Map([['dpu-a', ['10.244.0.0/26']]]),
      });
      await waitUntil(() => b.fabric.report().ready, 'the fabric acked');
    } finally {
      clearInterval(acker);
    }
    a1.close();
    await waitUntil(async () => !(await b.health()).ready, 'the agent gone');

    const a2 = connect('boot-2');
    const first = await snapshotAt(a2, 0);
    const ports = first.msgs.filter((m) => m.upsert?.port).map((m) => m.upsert!.port!);
    expect(ports.map((p) => p.name)).to.deep.equal(['w1/eth0']);
    expect(
      first.msgs.filter((m) => m.upsert?.fabric),
      'no fabric object in the first',
    ).to.have.length(0);
    expect(first.msgs[0]?.snapshotBegin?.keepUnlistedFabric, 'the fabric it holds is kept').to.equal(true);
    expect(first.msgs.at(-1)?.syncComplete).to.include({ portCount: 1, fabricCount: 0 });
    await new Promise((r) => setTimeout(r, 300));
    expect(fabricUpserts(a2), 'no fabric object before the port is acked').to.have.length(0);

    a2.send(okAck(ports[0]!.name, ports[0]!.generation));
    const whole = await snapshotAt(a2, first.next);
    expect(whole.msgs.filter((m) => m.upsert?.port).map((m) => m.upsert!.port!.name)).to.deep.equal([
      'w1/eth0',
    ]);
    expect(whole.msgs[0]?.snapshotBegin?.keepUnlistedFabric, 'the whole snapshot is authoritative').to.equal(
      false,
    );
    expect(whole.msgs.at(-1)?.syncComplete).to.include({ portCount: 1, fabricCount: 4 });
    expect(whole.msgs.filter((m) => m.upsert?.fabric)).to.have.length(4);
    expect(whole.msgs[0]?.snapshotBegin?.epoch).to.be.greaterThan(first.msgs[0]?.snapshotBegin?.epoch ?? 0);
  });
});
