import { expect } from 'chai';
import type { ControllerMessage } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { attachTo } from '../../support/attach-spec';
import { fabricAck, fabricUpserts, v3Hello } from './fabric-stream';
import { okAck, spec } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';
import { rawAgentBackend } from '../../support/raw-agent-backend';
import { VXLAN_SETTINGS, n3 } from '../../support/fabric-fixtures';
import { waitUntil } from '../../support/sim-process';

// A reconnecting agent with ports and fabric objects gets its ports first, in a snapshot of their own:
// a rebooted DPU programs its VFs (and the daemon moves them back) before it works through thousands
// of fabric objects. The whole snapshot follows once those ports are acked.

describe('DPU backend: a reconnect sends the ports before the fabric objects', function () {
  this.timeout(30_000);
  const rig = rawAgentBackend({ backend: () => ({ nodeName: 'n1' }) });
  const connect = (boot: string): RawAgent => rig.connect(v3Hello('dpu-a', { bootId: boot }));

  /** The messages of the snapshot beginning at index `from`, up to its SyncComplete. */
  async function snapshotAt(a: RawAgent, from: number): Promise<{ msgs: ControllerMessage[]; next: number }> {
    const begin = await a.next((m) => !!m.snapshotBegin, 'a snapshot', 5000, from);
    const start = a.received.indexOf(begin);
    const end = await a.next((m) => !!m.syncComplete, 'its sync complete', 5000, start);
    const stop = a.received.indexOf(end);
    return { msgs: a.received.slice(start, stop + 1), next: stop + 1 };
  }

  it('lists the ports alone first, and the fabric objects only once the ports are acked', async () => {
    const b = rig.backend;
    await b.fabric.prepare(VXLAN_SETTINGS);
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
