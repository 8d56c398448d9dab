import { expect } from 'chai';
import { Container } from 'inversify';
import { DEFAULT_CONFIG, mergeConfig, type DaemonConfig } from '../../core/config';
import { PEER_SOURCE, type PeerSource } from '../../core/fabric/peer-source';
import { POOL_SOURCE } from '../../core/ipam/pool-source';
import { silentLogger } from '../../core/logger';
import { EtcdPeerSource } from '../../pools/etcd/etcd-peer-source';
import { etcdPoolSourceModule, recordLeaseTtlSeconds } from '../../pools/etcd/module';

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
      const c = new Container({ defaultScope: 'Singleton' });
      c.bind(POOL_SOURCE).toConstantValue({});
      if (boundBefore) c.bind(PEER_SOURCE).toConstantValue({ kind: 'static' });
      c.load(etcdPoolSourceModule(config, silentLogger()));
      const peers = c.get<PeerSource>(PEER_SOURCE);
      expect(peers).to.be.instanceOf(EtcdPeerSource);
      expect(peers.kind).to.equal('etcd');
      expect(peers.synced).to.equal(false);
      expect(c.get(PEER_SOURCE), 'one per daemon').to.equal(peers);
    }
  });

  it('takes the record lease TTL from fabric.leaseTtlSeconds, 15 s by default', () => {
    expect(recordLeaseTtlSeconds(config)).to.equal(15);
    const withFabric = { ...config, fabric: { leaseTtlSeconds: 5 } } as DaemonConfig;
    expect(recordLeaseTtlSeconds(withFabric)).to.equal(5);
  });
});
