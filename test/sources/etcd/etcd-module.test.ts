import { expect } from 'chai';
import { Container } from 'inversify';
import { DEFAULT_CONFIG } from '../../../core/config';
import { mergeConfig } from '../../../core/daemon/config-check';
import { WorkloadNetError } from '../../../core/errors';
import { PEER_SOURCE, type PeerSource } from '../../../core/peer-source';
import { silentLogger } from '../../../core/logger';
import { EtcdPeerSource } from '../../../sources/etcd/etcd-peer-source';
import { BACKEND, type Backend, type BackendHealth } from '../../../core/backend';
import { connectedDpus, etcdPoolSourceModule } from '../../../sources/etcd/module';
import { loadedOverBindings } from '../support/module-container';

// With the etcd pool source, peers come from the same etcd: the module binds both, and building the
// peer source connects nothing (only start() does).

const config = mergeConfig(DEFAULT_CONFIG, {
  poolSource: 'etcd',
  nodeName: 'worker-1',
  etcd: { endpoints: ['http://10.0.0.1:2379'], clusterCidrs: ['10.96.0.0/12'] },
});

describe('etcd module', () => {
  it('binds the etcd peer source beside the pool source, whether or not a peer source was bound before', () => {
    for (const boundBefore of [false, true]) {
      const c = loadedOverBindings(etcdPoolSourceModule(config, silentLogger()), boundBefore);
      const peers = c.get<PeerSource>(PEER_SOURCE);
      expect(peers).to.be.instanceOf(EtcdPeerSource);
      expect(peers.kind).to.equal('etcd');
      expect(peers.synced).to.equal(false);
      expect(c.get(PEER_SOURCE), 'one per daemon').to.equal(peers);
    }
  });

  it('refuses at start a record of another node, or one other nodes would ignore, connecting nothing', async () => {
    const c = loadedOverBindings(etcdPoolSourceModule(config, silentLogger()), false);
    const peers = c.get<PeerSource>(PEER_SOURCE);
    const good = { node: 'worker-1', underlay: ['192.0.2.1'], mtu: 1500, bootId: 'b' };
    const refusal = (r: typeof good): Promise<unknown> =>
      peers.start(r).then(
        () => undefined,
        (e: unknown) => e,
      );
    const other = await refusal({ ...good, node: 'worker-2' });
    expect(other).to.be.instanceOf(WorkloadNetError);
    expect(other).to.include({ code: 'INVALID_ARGUMENT' });
    expect((other as Error).message).to.equal(
      'node record names worker-2, but this source serves node worker-1',
    );
    const noUnderlay = await refusal({ ...good, underlay: [] });
    expect((noUnderlay as Error).message).to.match(
      /this node's record has no underlay address .*; other nodes would ignore it/,
    );
    expect(peers.status()).to.include({ ready: false, connected: false });
  });

  it("asks the DPU backend's health which agents are connected, and says it cannot tell without one", async () => {
    const c = new Container({ defaultScope: 'Singleton' });
    const dpu = (id: string, connected: boolean): NonNullable<BackendHealth['dpus']>[number] =>
      ({ id, connected }) as NonNullable<BackendHealth['dpus']>[number];
    // A backend that places no port on a DPU is not asked: its health may be costly and lists no DPU.
    c.bind<Backend>(BACKEND).toConstantValue({
      name: 'linux',
      health: () => Promise.reject(new Error('not to be asked')),
    } as unknown as Backend);
    expect(await connectedDpus(c)).to.equal(undefined);
    c.bind<Backend>(BACKEND).toConstantValue({
      name: 'dpu',
      place: () => ({}),
      health: () =>
        Promise.resolve({
          ready: true,
          reasons: [],
          dpus: [dpu('a', true), dpu('b', false), dpu('c', true)],
        }),
    } as unknown as Backend);
    expect([...((await connectedDpus(c)) ?? [])].sort()).to.deep.equal(['a', 'c']);
  });
});
