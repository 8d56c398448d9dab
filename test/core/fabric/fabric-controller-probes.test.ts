import { expect } from 'chai';
import { FabricController, type FabricControllerOptions } from '../../../core/fabric/fabric-controller';
import type { OwnPrefixes, PeerProbe, FabricReport } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { RecordingFabricDataplane, peer, until } from '../../support/recording-fabric-dataplane';
import { GRACE_MS, controllerRig } from '../../support/controller-rig';

// The withdrawal rule with the data path as second witness: a peer that left its source is withdrawn at
// once only when its probes fail too (it answered before and no longer does); while they pass, or
// before it ever answered, it waits the whole grace. The grace's clock is moved by hand; the probes
// are set by hand on a recording dataplane.

class ProbingDataplane extends RecordingFabricDataplane {
  readonly health = new Map<string, PeerProbe>();
  readonly owns: Array<OwnPrefixes | undefined> = [];
  private readonly listeners: Array<(node: string) => void> = [];

  override apply(peers: readonly Peer[], own?: OwnPrefixes): Promise<FabricReport> {
    this.owns.push(own);
    return super.apply(peers);
  }
  probes(): ReadonlyMap<string, PeerProbe> {
    return this.health;
  }
  onProbeChange(listener: (node: string) => void): void {
    this.listeners.push(listener);
  }
  /** Sets what the probes say of `node` and tells the listeners. */
  probe(node: string, state: PeerProbe['state'], rttMs?: number): void {
    this.health.set(node, {
      state,
      target: `10.244.0.${node.slice(1)}`,
      lost: state === 'degraded' ? 3 : 0,
      answered: state !== 'unknown',
      since: new Date().toISOString(),
      ...(rttMs === undefined ? {} : { rttMs, medianRttMs: rttMs }),
    });
    for (const l of this.listeners) l(node);
  }
}

describe('fabric controller: withdrawal with data-path probes', () => {
  const rig = controllerRig(() => new ProbingDataplane());

  async function started(over: Partial<FabricControllerOptions> = {}): Promise<FabricController> {
    const controller = rig.make(over);
    await controller.start();
    rig.source.set([peer('n2', 2), peer('n3', 3), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 1, 5000, 'the first apply');
    return controller;
  }

  it('withdraws at once a peer whose lease lapsed and whose probes then fail (a dead node)', async () => {
    const c = await started();
    rig.dp.probe('n3', 'reachable', 0.4);
    rig.source.set([peer('n2', 2), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 2);
    expect(rig.dp.applied[1], 'kept while its probes pass').to.deep.equal(['n2', 'n3', 'n4']);
    // Its uplink is gone too: the probes fail; no time passes on the grace's clock.
    rig.dp.probe('n3', 'degraded');
    await until(() => rig.dp.applied.length === 3, 5000, 'an apply after the probe change');
    expect(rig.dp.applied[2], 'withdrawn before the grace').to.deep.equal(['n2', 'n4']);
    expect(c.status().peers.map((p) => p.node)).to.deep.equal(['n2', 'n4']);
  });

  it('withdraws at the first table a peer that was already degraded when it left the source', async () => {
    await started();
    rig.dp.probe('n3', 'degraded');
    rig.source.set([peer('n2', 2), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 2);
    expect(rig.dp.applied[1]).to.deep.equal(['n2', 'n4']);
  });

  it('keeps a peer cut from the source only (its probes pass) for the whole grace', async () => {
    const c = await started();
    rig.dp.probe('n3', 'reachable', 0.4);
    rig.source.set([peer('n2', 2), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 2);
    rig.dp.probe('n3', 'reachable', 0.5);
    rig.clock += GRACE_MS - 1;
    await c.applyNow();
    expect(rig.dp.applied.at(-1)).to.deep.equal(['n2', 'n3', 'n4']);
    const row = c.status().peers.find((p) => p.node === 'n3');
    expect(row?.withdrawnAt).to.be.a('string');
    expect(row?.reason).to.include('unless its data-path probes fail');
    rig.clock += 1;
    await c.applyNow();
    expect(rig.dp.applied.at(-1), 'gone when the grace is over').to.deep.equal(['n2', 'n4']);
  });

  it('keeps a peer that never answered a probe (no evidence either way) for the grace', async () => {
    const c = await started();
    rig.dp.probe('n3', 'unknown');
    rig.source.set([peer('n2', 2), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 2);
    rig.clock += GRACE_MS / 2;
    await c.applyNow();
    expect(rig.dp.applied.at(-1)).to.deep.equal(['n2', 'n3', 'n4']);
  });

  it('withdraws at once a peer that left after leaving every probe unanswered (it never proved itself)', async () => {
    await started();
    rig.dp.probe('n3', 'unknown');
    const silent = rig.dp.health.get('n3');
    if (silent) rig.dp.health.set('n3', { ...silent, lost: 3 });
    rig.source.set([peer('n2', 2), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 2);
    expect(rig.dp.applied[1], 'no grace for a peer that never answered').to.deep.equal(['n2', 'n4']);
  });

  it('drops with its record at once a peer no path reached (a refused claim), without the grace', async () => {
    const c = await started();
    // A record without a VTEP: the recording dataplane reports it unreachable, as a refused claim is.
    const squatter = { ...peer('aaa', 9), vtep: undefined };
    rig.source.set([squatter, peer('n2', 2), peer('n3', 3), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 2);
    expect(c.status().peers.find((p) => p.node === 'aaa')?.path).to.equal('unreachable');
    rig.source.set([peer('n2', 2), peer('n3', 3), peer('n4', 4)]);
    await until(() => rig.dp.applied.length === 3);
    expect(rig.dp.applied[2], 'gone at once, not kept for the grace').to.deep.equal(['n2', 'n3', 'n4']);
    expect(c.status().peers.map((p) => p.node)).to.deep.equal(['n2', 'n3', 'n4']);
  });

  it('shows a degraded peer still in its source as degraded, keeps it, and sets the gauges', async () => {
    const c = await started();
    rig.dp.probe('n2', 'reachable', 0.2);
    rig.dp.probe('n3', 'degraded');
    rig.dp.probe('n4', 'reachable', 0.8);
    await c.applyNow();
    expect(rig.dp.applied.at(-1), 'degraded is not withdrawn').to.deep.equal(['n2', 'n3', 'n4']);
    const st = c.observe();
    expect(st.peers.find((p) => p.node === 'n3')?.probe?.state).to.equal('degraded');
    expect(st.peers.find((p) => p.node === 'n2')?.probe).to.include({ state: 'reachable', rttMs: 0.2 });
    const text = await rig.metrics.registry.metrics();
    expect(text).to.match(/^workloadnet_fabric_peers_degraded 1$/m);
    expect(text).to.match(/^workloadnet_fabric_probe_rtt_seconds\{quantile="1"\} 0\.0008$/m);
    expect(text).to.match(/^workloadnet_fabric_probe_rtt_seconds\{quantile="0\.5"\} 0\.0008$/m);
  });

  it("gives the dataplane this node's ranges, and applies again when they change", async () => {
    let ranges = ['10.244.1.0/24'];
    await started({ keyRanges: () => ranges, rangesCheckMs: 20 });
    expect(rig.dp.owns[0]?.keyRanges).to.deep.equal(['10.244.1.0/24']);
    ranges = ['10.244.1.0/24', '10.244.0.0/24'];
    await until(() => rig.dp.owns.length >= 2, 5000, 'an apply after the ranges changed');
    expect(rig.dp.owns.at(-1)?.keyRanges).to.deep.equal(['10.244.1.0/24', '10.244.0.0/24']);
  });
});
