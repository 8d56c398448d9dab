import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Container } from 'inversify';
import { bindPoolSource } from '../../../cli/pool-source-wiring';
import { DEFAULT_CONFIG, type ConfigOverrides, type NetworkConfig } from '../../../core/config';
import { mergeConfig } from '../../../core/daemon/config-check';
import { POOL_SOURCE, STATIC_POOL_SOURCE, type PoolSource } from '../../../core/ipam/pool-source';
import { silentLogger } from '../../../core/logger';
import { METRICS, Metrics } from '../../../core/metrics';
import { PEER_SOURCE, type PeerSource } from '../../../core/peer-source';
import { STORE } from '../../../core/store/store';
import { EtcdPeerSource } from '../../../sources/etcd/etcd-peer-source';
import { EtcdPoolSource } from '../../../sources/etcd/etcd-pool-source';
import { staticPoolSourceModule } from '../../../sources/static/module';
import { StaticPeerSource } from '../../../sources/static/static-peer-source';
import { StaticPoolSource } from '../../../sources/static/static-pool-source';

// The static sources come to the core as a module (the core imports no source): the configured pools
// for the default network and every other one, the peers file as the peer source. A cluster source
// loaded after it takes the default network's pools and the peers; the other networks keep theirs.

const NETWORKS: NetworkConfig[] = [
  { name: 'default', backend: 'linux', podCidrs: ['10.244.1.0/24'] },
  { name: 'storage', backend: 'linux', podCidrs: ['10.60.0.0/24'] },
];

const containerOf = (overrides: ConfigOverrides = {}): Container => {
  const c = new Container({ defaultScope: 'Singleton' });
  c.load(staticPoolSourceModule(mergeConfig(DEFAULT_CONFIG, overrides), silentLogger()));
  return c;
};

const peer = (node: string, octet: number, prefixes: string[]): Record<string, unknown> => ({
  node,
  underlay: [`192.0.2.${octet}`],
  vtep: { mac: `0e:77:c0:00:02:0${octet}`, vni: 30574, port: 4789 },
  prefixes,
});

/** The peers a file lists as the module's peer source routes them, and its lines about the rest. */
async function readThroughModule(
  overrides: ConfigOverrides,
  peers: unknown[],
): Promise<{ routed: Record<string, string[]>; rejected: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-static-module-'));
  const peersFile = path.join(dir, 'peers.json');
  fs.writeFileSync(peersFile, JSON.stringify({ peers }));
  const source = containerOf({
    ...overrides,
    fabric: { ...overrides.fabric, peersFile },
  }).get<PeerSource>(PEER_SOURCE);
  try {
    await source.start({ node: 'n1', underlay: ['192.0.2.1'], mtu: 1500, bootId: 'b1' });
    return {
      routed: Object.fromEntries([...source.peers()].map(([node, p]) => [node, p.prefixes])),
      rejected: (source.status().rejected ?? []).join('\n'),
    };
  } finally {
    await source.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

describe('static sources module', () => {
  it('binds one static pool source for the default network, a new one for each other network, and the peers file', () => {
    const c = containerOf();
    const pools = c.get<PoolSource>(POOL_SOURCE);
    expect(pools).to.be.instanceOf(StaticPoolSource);
    expect(c.get(POOL_SOURCE), 'one per daemon').to.equal(pools);
    const one = c.get<PoolSource>(STATIC_POOL_SOURCE);
    expect(one).to.be.instanceOf(StaticPoolSource);
    expect(c.get(STATIC_POOL_SOURCE), 'one per network').to.not.equal(one);
    const peers = c.get<PeerSource>(PEER_SOURCE);
    expect(peers).to.be.instanceOf(StaticPeerSource);
    expect(peers.kind).to.equal('static');
  });

  it("gives the peers file every network's pools and the cluster's ranges to check prefixes against", async () => {
    const { routed, rejected } = await readThroughModule({ networks: NETWORKS }, [
      peer('n2', 2, ['10.244.2.0/24', '10.60.0.0/25']),
      peer('n3', 3, ['10.244.3.0/24', '10.244.1.128/25']),
    ]);
    expect(routed).to.deep.equal({ n2: ['10.244.2.0/24'], n3: ['10.244.3.0/24'] });
    expect(rejected).to.contain("10.60.0.0/25 overlaps this node's own range 10.60.0.0/24");
    expect(rejected).to.contain("10.244.1.128/25 overlaps this node's own range 10.244.1.0/24");

    const bounded = await readThroughModule(
      { podCidrs: ['10.244.1.0/24'], fabric: { clusterCidrs: ['10.244.0.0/16'] } },
      [peer('n3', 3, ['10.244.3.0/24', '10.99.0.0/24'])],
    );
    expect(bounded.routed).to.deep.equal({ n3: ['10.244.3.0/24'] });
    expect(bounded.rejected).to.contain('10.99.0.0/24 is outside the cluster ranges');
  });

  it("leaves the other networks their static pools when the wiring loads a cluster source in the default's place", async () => {
    const config = mergeConfig(DEFAULT_CONFIG, {
      poolSource: 'etcd',
      nodeName: 'worker-1',
      etcd: { endpoints: ['http://10.0.0.1:2379'], clusterCidrs: ['10.96.0.0/12'] },
    });
    const c = new Container({ defaultScope: 'Singleton' });
    c.bind(STORE).toConstantValue({});
    c.bind(METRICS).toConstantValue(new Metrics());
    await bindPoolSource(c, config, silentLogger());
    expect(c.get(POOL_SOURCE)).to.be.instanceOf(EtcdPoolSource);
    expect(c.get(PEER_SOURCE)).to.be.instanceOf(EtcdPeerSource);
    expect(c.get(STATIC_POOL_SOURCE)).to.be.instanceOf(StaticPoolSource);
  });
});
