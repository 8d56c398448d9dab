import { expect } from 'chai';
import { DEFAULT_CONFIG, type ConfigOverrides } from '../../../core/config';
import { fabricMode, fabricSettings } from '../../../core/fabric/fabric-settings';
import { mergeConfig } from '../../../core/daemon/config-check';
import { effectiveConfig } from '../../../cli/daemon-command';

// The fabric section of the configuration: defaults by pool source, validation, flags.

const ETCD: ConfigOverrides = {
  poolSource: 'etcd',
  etcd: { endpoints: ['http://127.0.0.1:2379'], clusterCidrs: ['10.96.0.0/12'] },
};

describe('fabric configuration', () => {
  it('is off by default with the static pool source and hybrid with a cluster one', () => {
    expect(fabricMode(mergeConfig(DEFAULT_CONFIG))).to.equal('off');
    expect(fabricSettings(mergeConfig(DEFAULT_CONFIG))).to.equal(undefined);
    expect(fabricMode(mergeConfig(DEFAULT_CONFIG, ETCD))).to.equal('hybrid');
    expect(fabricMode(mergeConfig(DEFAULT_CONFIG, { poolSource: 'kubernetes' }))).to.equal('hybrid');
    expect(fabricMode(mergeConfig(DEFAULT_CONFIG, ETCD, { fabric: { mode: 'off' } }))).to.equal('off');
  });

  it('gives the dataplane the VXLAN settings and, with etcd, the cluster ranges for the catch-all', () => {
    expect(
      fabricSettings(mergeConfig(DEFAULT_CONFIG, ETCD, { fabric: { nodeIp: '10.0.0.1' } })),
    ).to.deep.equal({
      mode: 'hybrid',
      nodeIp: '10.0.0.1',
      vni: 30574,
      port: 4789,
      clusterCidrs: ['10.96.0.0/12'],
      sourceFilter: true,
      probeIntervalSeconds: 5,
    });
    expect(
      fabricSettings(mergeConfig(DEFAULT_CONFIG, ETCD, { fabric: { sourceFilter: false } }))?.sourceFilter,
      'fabric.sourceFilter reaches the dataplane',
    ).to.equal(false);
    expect(
      fabricSettings(mergeConfig(DEFAULT_CONFIG, { fabric: { mode: 'vxlan' } }))?.clusterCidrs,
    ).to.deep.equal([]);
  });

  for (const [fabric, message] of [
    [{ mode: 'bgp' }, 'fabric.mode must be one of auto, off, routed, vxlan, hybrid, external, not "bgp"'],
    [{ nodeIp: '10.0.0.1/24' }, 'fabric.nodeIp "10.0.0.1/24" is not an IPv4 or IPv6 address'],
    [{ vni: 0 }, 'fabric.vni must be an integer in 1..16777215, not 0'],
    [{ vni: 1 << 24 }, 'fabric.vni must be an integer in 1..16777215'],
    [{ port: 70000 }, 'fabric.port must be a UDP port in 1..65535, not 70000'],
    [{ peersFile: 'peers.json' }, 'fabric.peersFile must be an absolute path or empty'],
    [{ leaseTtlSeconds: 60 }, 'fabric.leaseTtlSeconds must be an integer in 1..15'],
    [{ withdrawGraceSeconds: -1 }, 'fabric.withdrawGraceSeconds must be an integer in 0..86400, not -1'],
    [{ sourceFilter: 'yes' }, 'fabric.sourceFilter must be true or false, not "yes"'],
    [
      { probeIntervalSeconds: 0.5 },
      'fabric.probeIntervalSeconds must be an integer in 0..3600 (0 turns the data-path probes off), not 0.5',
    ],
    [
      { probeIntervalSeconds: -1 },
      'fabric.probeIntervalSeconds must be an integer in 0..3600 (0 turns the data-path probes off), not -1',
    ],
  ] as const) {
    it(`refuses ${JSON.stringify(fabric)} with a message naming the option`, () => {
      expect(() => mergeConfig(DEFAULT_CONFIG, { fabric: fabric as ConfigOverrides['fabric'] })).to.throw(
        `invalid configuration: ${message}`,
      );
    });
  }

  it('refuses a peers file beside the etcd or the Kubernetes source, which would be ignored', () => {
    expect(() => mergeConfig(DEFAULT_CONFIG, ETCD, { fabric: { peersFile: '/etc/peers.json' } })).to.throw(
      'fabric.peersFile is for the static peer source; with poolSource "etcd" the peers come from etcd',
    );
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, { poolSource: 'kubernetes' }, { fabric: { peersFile: '/etc/peers.json' } }),
    ).to.throw('with poolSource "kubernetes" the peers come from the Kubernetes API');
  });

  it('gives the static and Kubernetes sources the cluster ranges of fabric.clusterCidrs, one per family', () => {
    const k8s = mergeConfig(
      DEFAULT_CONFIG,
      { poolSource: 'kubernetes' },
      {
        fabric: { clusterCidrs: ['10.244.0.0/16', 'fd00:244::/56'] },
      },
    );
    expect(fabricSettings(k8s)?.clusterCidrs).to.deep.equal(['10.244.0.0/16', 'fd00:244::/56']);
    const fromStatic = mergeConfig(DEFAULT_CONFIG, {
      podCidrs: ['10.244.3.0/24'],
      fabric: { mode: 'vxlan', clusterCidrs: ['10.244.0.0/16'] },
    });
    expect(fabricSettings(fromStatic)?.clusterCidrs).to.deep.equal(['10.244.0.0/16']);
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, { fabric: { clusterCidrs: ['10.244.0.0/16', '10.245.0.0/16'] } }),
    ).to.throw('fabric.clusterCidrs has two IPv4 ranges; give one per family');
    expect(() => mergeConfig(DEFAULT_CONFIG, { fabric: { clusterCidrs: ['10.244.0.0'] } })).to.throw(
      'fabric.clusterCidrs: ',
    );
    expect(() => mergeConfig(DEFAULT_CONFIG, ETCD, { fabric: { clusterCidrs: ['10.96.0.0/12'] } })).to.throw(
      'fabric.clusterCidrs is for the static and kubernetes pool sources; with etcd the cluster ranges are etcd.clusterCidrs',
    );
  });

  it("refuses cluster ranges that miss the node's own static range, or that another network's pools overlap", () => {
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, {
        podCidrs: ['10.88.0.0/16'],
        fabric: { clusterCidrs: ['10.244.0.0/16'] },
      }),
    ).to.throw(
      "podCidrs 10.88.0.0/16 is outside fabric.clusterCidrs 10.244.0.0/16: the cluster's ranges must hold the node's",
    );
    expect(
      () =>
        mergeConfig(DEFAULT_CONFIG, {
          podCidrs: ['10.0.0.0/8'],
          fabric: { clusterCidrs: ['10.244.0.0/16'] },
        }),
      'a node range wider than the cluster range',
    ).to.throw('podCidrs 10.0.0.0/8 is outside fabric.clusterCidrs 10.244.0.0/16');
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, {
        poolSource: 'kubernetes',
        networks: [
          { name: 'default', backend: 'linux' },
          { name: 'fast', backend: 'dpu', podCidrs: ['10.244.200.0/24'] },
        ],
        fabric: { clusterCidrs: ['10.244.0.0/16'] },
      }),
    ).to.throw(
      'network "fast": pod CIDR 10.244.200.0/24 overlaps 10.244.0.0/16 of network "default" (its fabric.clusterCidrs)',
    );
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, {
        networks: [{ name: 'default', backend: 'linux', podCidrs: ['10.99.7.0/24'] }],
        fabric: { clusterCidrs: ['10.244.0.0/16'] },
      }),
    ).to.throw('podCidrs 10.99.7.0/24 is outside fabric.clusterCidrs 10.244.0.0/16');
    // The default network's own ranges inside it are what it is for.
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, {
        networks: [{ name: 'default', backend: 'linux', podCidrs: ['10.244.7.0/24'] }],
        fabric: { clusterCidrs: ['10.244.0.0/16'] },
      }),
    ).to.not.throw();
  });

  it('takes --fabric, --node-ip and --peers-file (relative to the working directory)', () => {
    const c = effectiveConfig({ fabric: 'vxlan', nodeIp: 'fd00::1', peersFile: 'peers.json' });
    expect(c.fabric).to.deep.include({
      mode: 'vxlan',
      nodeIp: 'fd00::1',
      peersFile: `${process.cwd()}/peers.json`,
    });
  });
});
