import { expect } from 'chai';
import {
  DEFAULT_CONFIG,
  fabricMode,
  fabricSettings,
  mergeConfig,
  type ConfigOverrides,
} from '../../../core/config';
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

  it('takes --fabric, --node-ip and --peers-file (relative to the working directory)', () => {
    const c = effectiveConfig({ fabric: 'vxlan', nodeIp: 'fd00::1', peersFile: 'peers.json' });
    expect(c.fabric).to.deep.include({
      mode: 'vxlan',
      nodeIp: 'fd00::1',
      peersFile: `${process.cwd()}/peers.json`,
    });
  });
});
