import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AppliedPeersFile } from '../../../core/fabric/applied-peers-file';
import { FabricController } from '../../../core/fabric/fabric-controller';
import type { FabricSettings } from '../../../core/fabric-dataplane';
import { silentLogger } from '../../../core/logger';
import type { NodeRecord } from '../../../core/peer-source';
import {
  ManualPeerSource,
  RecordingFabricDataplane,
  peer,
  until,
} from '../../support/recording-fabric-dataplane';
import { DpuDataplane } from './dpu-recording-dataplane';

/** A source that refuses a record without an underlay address, as the etcd source does. */
class UnderlayCheckingSource extends ManualPeerSource {
  refusals = 0;
  override async start(self: NodeRecord): Promise<void> {
    if (self.underlay.length === 0) {
      this.refusals++;
      throw new Error("this node's record has no underlay address");
    }
    await super.start(self);
  }
}

// The withdrawal grace across a restart of the daemon, and when most peers leave at once: a route is
// removed only after the grace, whatever the first list after a restart says.

const SETTINGS: FabricSettings = { mode: 'vxlan', nodeIp: '', vni: 30574, port: 4789, clusterCidrs: [] };
const GRACE_MS = 180_000;

describe('fabric controller across a restart and a mass withdrawal', () => {
  let dir: string;
  let clock: number;
  const controllers: FabricController[] = [];

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabric-restart-'));
    clock = 1_000_000;
  });
  afterEach(async () => {
    for (const c of controllers.splice(0)) await c.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  function make(source: ManualPeerSource, dp: RecordingFabricDataplane, retryMs?: number): FabricController {
    const c = new FabricController({
      ...(retryMs !== undefined ? { retryMs } : {}),
      settings: SETTINGS,
      nodeName: 'n1',
      bootId: 'boot-n1',
      source,
      dataplanes: [dp],
      backends: ['linux'],
      withdrawGraceMs: GRACE_MS,
      appliedPeers: new AppliedPeersFile(path.join(dir, 'fabric-peers.json'), silentLogger(), {
        minIntervalMs: 0,
      }),
      log: silentLogger(),
      now: () => clock,
      coalesceMs: 5,
    });
    controllers.push(c);
    return c;
  }

  it('gives a peer the grace when the first list after a restart lacks it', async () => {
    const s1 = new ManualPeerSource();
    const dp1 = new RecordingFabricDataplane();
    const first = make(s1, dp1);
    await first.start();
    s1.set([peer('n2', 2), peer('n3', 3)]);
    await until(() => dp1.applied.length === 1);
    await first.stop();
    controllers.splice(0);

    const source = new ManualPeerSource();
    const dp = new RecordingFabricDataplane();
    const c = make(source, dp);
    await c.start();
    source.set([peer('n2', 2)]);
    await until(() => dp.applied.length === 1);
    expect(dp.applied[0], 'n3 is still programmed after the restart').to.deep.equal(['n2', 'n3']);
    expect(c.status().peers.find((p) => p.node === 'n3')?.withdrawnAt).to.be.a('string');
    clock += GRACE_MS;
    await c.applyNow();
    expect(dp.applied.at(-1), 'removed once its grace is over').to.deep.equal(['n2']);
  });

  it('withdraws one peer per grace period when most leave at once, and says so', async () => {
    const source = new ManualPeerSource();
    const dp = new RecordingFabricDataplane();
    const c = make(source, dp);
    await c.start();
    const all = Array.from({ length: 6 }, (_, i) => peer(`n${i + 2}`, i + 2));
    source.set(all);
    await until(() => dp.applied.length === 1);
    source.set(all.slice(0, 2));
    await until(() => dp.applied.length === 2);
    expect(c.status().warnings.join(' ')).to.include('4 of 6 peers left the peer source');
    clock += GRACE_MS;
    await c.applyNow();
    expect(dp.applied.at(-1), 'one withdrawn').to.have.length(5);
    await c.applyNow();
    expect(dp.applied.at(-1), 'not a second within the period').to.have.length(5);
    expect(c.status().ready, 'a slowed withdrawal is not a fault of this node').to.equal(true);
  });

  it('starts a source that refused a record without an underlay once the DPUs bring one, not at the retry', async () => {
    // After a restart, a node reached only through its DPUs has no underlay until they reconnect.
    const source = new UnderlayCheckingSource();
    const dp = new DpuDataplane();
    dp.local = { ...dp.local, underlay: [] };
    const c = make(source, dp, 600_000);
    await c.start();
    await until(() => source.refusals === 1, 5_000, 'the first record refused');
    expect(c.status().reasons.join('; ')).to.match(/peer source manual did not start: .*no underlay/);
    dp.local = { ...dp.local, underlay: ['192.0.2.1'] };
    dp.setDpus(['d0']);
    await until(() => source.started !== undefined, 5_000, 'the source started with the new record');
    expect(source.started?.underlay).to.deep.equal(['192.0.2.1']);
    expect(source.refusals).to.equal(1);
    await until(() => !c.status().reasons.some((r) => r.includes('did not start')), 5_000, 'the reason gone');
  });
});
