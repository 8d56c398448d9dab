import { expect } from 'chai';
import * as path from 'node:path';
import type { DpuBackend } from '../../../backends/dpu';
import { attachTo } from '../../support/attach-spec';
import { rejection } from '../../support/expect-error';
import { okAck, removeDir, scratchDir, spec, startBackend } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';

// place(): the agent a new interface goes to, chosen before its address is allocated (so that the
// address can come from that DPU's slices), by the same rule attach uses; attach then keeps to it.

describe('DPU backend: placement before allocation', function () {
  this.timeout(20_000);
  let dir: string;
  let backend: DpuBackend | undefined;
  const agents: RawAgent[] = [];

  beforeEach(() => {
    dir = scratchDir();
  });

  afterEach(async () => {
    for (const a of agents.splice(0)) a.close();
    await backend?.stop();
    backend = undefined;
    removeDir(dir);
  });

  async function connect(id: string, fabric = false): Promise<RawAgent> {
    const a = new RawAgent(path.join(dir, 'agent.sock'));
    agents.push(a);
    const carries = {
      maxProtocolVersion: 3,
      minProtocolVersion: 1,
      uplinkAddresses: ['10.0.1.11'],
      uplinkMtu: 1500,
    };
    a.send(
      RawAgent.hello(id, {
        capabilities: {
          maxPorts: 4,
          ipv6: true,
          minMtu: 68,
          maxMtu: 9216,
          features: fabric ? ['fabric-vxlan'] : [],
        },
        ...(fabric ? carries : {}),
      }),
    );
    a.keepAlive(100);
    await a.next((m) => !!m.syncComplete, 'its snapshot');
    return a;
  }

  const req = (i: number, dpu?: string) => ({ workloadId: `w${i}`, ifName: 'eth0', network: 'default', dpu });

  it('is UNAVAILABLE before the start-up reconcile and with no agent, naming why', async () => {
    backend = await startBackend(dir, {}, false);
    const early = await rejection(
      Promise.resolve().then(async () => backend!.place(req(1))),
      'UNAVAILABLE',
    );
    expect(early.message).to.match(/start-up reconcile/);
    await backend.reconcile([]);
    const none = await rejection(
      Promise.resolve().then(async () => backend!.place(req(1))),
      'UNAVAILABLE',
    );
    expect(none.message).to.match(/no DPU agent is connected/);
  });

  it('names the agent attach then uses: the one asked for, else the one with most room', async () => {
    backend = await startBackend(dir);
    const a = await connect('dpu-a');
    await connect('dpu-b');
    expect((await backend.place(req(1))).dpu, 'a tie goes to the lower id').to.equal('dpu-a');
    expect((await backend.place(req(1, 'dpu-b'))).dpu).to.equal('dpu-b');
    const away = await rejection(
      Promise.resolve().then(async () => backend!.place(req(1, 'dpu-z'))),
      'UNAVAILABLE',
    );
    expect(away.message).to.match(/dpu-z is not connected/);

    const s = spec(1, { dpu: (await backend.place(req(1))).dpu });
    const attach = attachTo(backend, s);
    const up = await a.next((m) => !!m.upsert?.port, 'the port on dpu-a');
    a.send(okAck(up.upsert!.port!.name, up.upsert!.port!.generation));
    await attach;
    expect((await backend.place(req(1, 'dpu-b'))).dpu, 'a placed interface keeps its agent').to.equal(
      'dpu-a',
    );
    expect((await backend.place(req(2))).dpu, 'the next goes where there is more room').to.equal('dpu-b');
  });

  it('makes a DPU that carries the fabric the endpoint whose slices the address comes from, and no other', async () => {
    backend = await startBackend(dir);
    await connect('dpu-a', true);
    await connect('dpu-b');
    expect(await backend.place(req(1, 'dpu-a'))).to.deep.equal({ dpu: 'dpu-a', endpoint: 'dpu-a' });
    expect(await backend.place(req(1, 'dpu-b')), 'a version 1 agent owns no slice').to.deep.equal({
      dpu: 'dpu-b',
    });
  });

  it('waits after a restart of the daemon for its agents to reconnect, as attach does', async () => {
    // A store that existed (reconcile without storeIsNew): agents are expected back.
    backend = await startBackend(dir, { startupAgentWaitMs: 10_000 });
    const placing = backend.place(req(1));
    await new Promise((r) => setTimeout(r, 300));
    await connect('dpu-a');
    expect((await placing).dpu, 'placed on the agent that came back').to.equal('dpu-a');
  });
});
