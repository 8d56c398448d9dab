import { expect } from 'chai';
import { DEFAULT_CONFIG, type ConfigOverrides, type NetworkConfig } from '../../core/config';
import { effectiveNetworks } from '../../core/ipam/effective-networks';
import { mergeConfig } from '../../core/daemon/config-check';
import { WorkloadNetError } from '../../core/errors';
import { validateNetworkName } from '../../core/attach/validation';

// Named networks in the config: none means one `default` network made of the flags, exactly as
// before; bad input is refused with a message that says what to fix.

function rejects(overrides: ConfigOverrides, message: RegExp): void {
  let err: unknown;
  try {
    mergeConfig(DEFAULT_CONFIG, overrides);
  } catch (e) {
    err = e;
  }
  expect(err, 'refused').to.be.instanceOf(WorkloadNetError);
  expect((err as WorkloadNetError).code).to.equal('INVALID_ARGUMENT');
  expect((err as Error).message).to.match(message);
}

const nets = (...networks: Array<Partial<NetworkConfig>>): ConfigOverrides => ({
  networks: networks as NetworkConfig[],
});

describe('networks configuration', () => {
  it('means one "default" network made of backend, podCidrs and mtu when none is configured', () => {
    const c = mergeConfig(DEFAULT_CONFIG, { backend: 'dpu', podCidrs: ['10.9.0.0/24'], mtu: 1400 });
    expect(effectiveNetworks(c)).to.deep.equal([
      {
        name: 'default',
        backend: 'dpu',
        podCidrs: ['10.9.0.0/24'],
        mtu: 1400,
        defaultRoute: true,
        routes: [],
        masquerade: true,
      },
    ]);
  });

  it('fills in the defaults: the daemon MTU, the default route for "default" only, no extra routes', () => {
    const c = mergeConfig(DEFAULT_CONFIG, {
      mtu: 1450,
      ...nets(
        { name: 'default', backend: 'linux', podCidrs: ['10.1.0.0/24'] },
        { name: 'fast', backend: 'dpu', podCidrs: ['10.2.0.0/24'], mtu: 9000, routes: ['10.3.0.0/16'] },
      ),
    });
    expect(effectiveNetworks(c)).to.deep.equal([
      {
        name: 'default',
        backend: 'linux',
        podCidrs: ['10.1.0.0/24'],
        mtu: 1450,
        defaultRoute: true,
        routes: [],
        masquerade: true,
      },
      {
        name: 'fast',
        backend: 'dpu',
        podCidrs: ['10.2.0.0/24'],
        mtu: 9000,
        defaultRoute: false,
        routes: ['10.3.0.0/16'],
        masquerade: true,
      },
    ]);
  });

  it("masquerades a network's pods leaving the cluster unless it or the daemon says not to", () => {
    const c = mergeConfig(DEFAULT_CONFIG, {
      masquerade: false,
      ...nets(
        { name: 'default', backend: 'linux', podCidrs: ['10.1.0.0/24'] },
        { name: 'routed', backend: 'linux', podCidrs: ['10.2.0.0/24'], masquerade: true },
      ),
    });
    expect(effectiveNetworks(c).map((n) => [n.name, n.masquerade])).to.deep.equal([
      ['default', false],
      ['routed', true],
    ]);
    expect(() =>
      mergeConfig(
        DEFAULT_CONFIG,
        nets({
          name: 'x',
          backend: 'linux',
          podCidrs: ['10.1.0.0/24'],
          masquerade: 'yes' as unknown as boolean,
        }),
      ),
    ).to.throw(/network "x": masquerade must be true or false/);
    expect(() => mergeConfig(DEFAULT_CONFIG, { masquerade: 'yes' as unknown as boolean })).to.throw(
      /masquerade must be true or false/,
    );
  });

  it('refuses two networks of one name', () =>
    rejects(
      nets(
        { name: 'a', backend: 'linux', podCidrs: ['10.1.0.0/24'] },
        { name: 'a', backend: 'dpu', podCidrs: ['10.2.0.0/24'] },
      ),
      /two networks are named "a"/,
    ));
  it('refuses overlapping pools across networks', () =>
    rejects(
      nets(
        { name: 'a', backend: 'linux', podCidrs: ['10.1.0.0/16'] },
        { name: 'b', backend: 'dpu', podCidrs: ['10.1.2.0/24'] },
      ),
      /10\.1\.2\.0\/24 overlaps 10\.1\.0\.0\/16 of network "a"/,
    ));
  it("refuses a named network's pod CIDR inside the etcd cluster range the default network's blocks come from", () => {
    const etcd = {
      poolSource: 'etcd' as const,
      etcd: { endpoints: ['http://127.0.0.1:2379'], clusterCidrs: ['10.96.0.0/24', 'fd96::/112'] },
    };
    rejects(
      {
        ...etcd,
        ...nets(
          { name: 'default', backend: 'linux' },
          { name: 'second', backend: 'linux', podCidrs: ['10.96.0.0/26'] },
        ),
      },
      /network "second": pod CIDR 10\.96\.0\.0\/26 overlaps 10\.96\.0\.0\/24 of network "default" \(its etcd\.clusterCidrs\)/,
    );
    // Whatever the order of the networks, and for IPv6 too.
    rejects(
      {
        ...etcd,
        ...nets(
          { name: 'second', backend: 'linux', podCidrs: ['fd96::ff00/120'] },
          { name: 'default', backend: 'linux' },
        ),
      },
      /network "second": pod CIDR fd96::ff00\/120 overlaps fd96::\/112 of network "default"/,
    );
    // Outside the cluster range, and the default network's own podCidrs repeating it, are fine.
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, {
        ...etcd,
        ...nets(
          { name: 'default', backend: 'linux', podCidrs: ['10.96.0.0/24'] },
          { name: 'second', backend: 'linux', podCidrs: ['10.97.0.0/26'] },
        ),
      }),
    ).to.not.throw();
  });
  it('refuses an unknown backend', () =>
    rejects(nets({ name: 'a', backend: 'sriov' as never, podCidrs: ['10.1.0.0/24'] }), /backend must be/));
  it('refuses an unknown key, naming the known ones', () =>
    rejects(
      nets({
        name: 'a',
        backend: 'linux',
        podCidrs: ['10.1.0.0/24'],
        gateway: 'x',
      } as Partial<NetworkConfig>),
      /unknown key "gateway"/,
    ));
  it('refuses a network without pools, except "default" with a cluster pool source', () => {
    rejects(nets({ name: 'a', backend: 'linux' }), /network "a" has no podCidrs/);
    expect(() =>
      mergeConfig(DEFAULT_CONFIG, {
        poolSource: 'kubernetes',
        ...nets({ name: 'default', backend: 'linux' }),
      }),
    ).to.not.throw();
  });
  it('refuses a cluster pool source without a "default" network to supply', () =>
    rejects(
      { poolSource: 'kubernetes', ...nets({ name: 'fast', backend: 'dpu', podCidrs: ['10.2.0.0/24'] }) },
      /supplies the "default" network's pools/,
    ));
  it('refuses a bad name, MTU, route or defaultRoute', () => {
    rejects(nets({ name: 'a/b', backend: 'linux', podCidrs: ['10.1.0.0/24'] }), /name must be/);
    rejects(nets({ name: 'a', backend: 'linux', podCidrs: ['10.1.0.0/24'], mtu: 40 }), /mtu must be/);
    rejects(
      nets({ name: 'a', backend: 'linux', podCidrs: ['10.1.0.0/24'], routes: ['10.1.0.1/16'] }),
      /routes/,
    );
    rejects(
      nets({ name: 'a', backend: 'linux', podCidrs: ['10.1.0.0/24'], defaultRoute: 'yes' as never }),
      /defaultRoute must be true or false/,
    );
  });
  it('accepts a call\'s network name by the same rule, and an empty one as "none given"', () => {
    expect(validateNetworkName('')).to.equal(undefined);
    expect(validateNetworkName(undefined)).to.equal(undefined);
    expect(validateNetworkName('fast-1.x')).to.equal('fast-1.x');
    expect(() => validateNetworkName('bad name')).to.throw(/network name/);
    expect(() => validateNetworkName('x'.repeat(65))).to.throw(/network name/);
  });
});
