import { expect } from 'chai';
import { effectiveNetworks } from '../../../core/ipam/effective-networks';
import { DEFAULT_CONFIG, type NetworkConfig } from '../../../core/config';
import { mergeConfig } from '../../../core/daemon/config-check';
import { WorkloadNetError } from '../../../core/errors';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { Network, NetworkSet } from '../../../core/ipam/network';
import { PoolSupply } from '../../../core/ipam/pool-supply';
import { StaticPoolSource } from '../../../sources/static/static-pool-source';
import { RecordingBackend } from '../../support/recording-backend';

// No address is ever in two networks' pools: the networks' allocators meet in one address space when
// the node's NetworkSet is built, and a pool added later (by a pool source) that overlaps another
// network's is refused, naming both.

const backend = new RecordingBackend();

/** A NetworkSet of `default` (pools as given: none = a pool source's to supply) and `second`. */
function networkSet(defaultPools: string[], secondPools: string[]): NetworkSet {
  const config = mergeConfig(DEFAULT_CONFIG, {
    poolSource: 'kubernetes',
    networks: [
      { name: 'default', backend: 'linux' },
      { name: 'second', backend: 'linux', podCidrs: secondPools },
    ] as NetworkConfig[],
  });
  return new NetworkSet(
    effectiveNetworks(config).map((n) => {
      const allocator = new IpAllocator(
        (n.name === 'default' ? defaultPools : n.podCidrs).map((cidr) => ({ cidr })),
      );
      return new Network(n, backend, allocator, new PoolSupply(new StaticPoolSource(), allocator));
    }),
  );
}

function refused(fn: () => unknown): WorkloadNetError {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err, 'refused').to.be.instanceOf(WorkloadNetError);
  expect((err as WorkloadNetError).code).to.equal('INVALID_ARGUMENT');
  return err as WorkloadNetError;
}

describe('address space (pools across networks)', () => {
  it('refuses networks built with overlapping pools, naming both', () => {
    const err = refused(() => networkSet(['10.96.0.0/24'], ['10.96.0.0/26']));
    expect(err.message).to.match(
      /10\.96\.0\.0\/26 of network "second" overlaps pool 10\.96\.0\.0\/24 of network "default"/,
    );
  });

  it("refuses a range added at run time that overlaps another network's pool, and takes one that does not", () => {
    const set = networkSet([], ['10.96.0.0/26']);
    const def = set.get('default').allocator;
    expect(def.conflictElsewhere('10.96.0.0/24')).to.equal('pool 10.96.0.0/26 of network "second"');
    const err = refused(() => def.addPool({ cidr: '10.96.0.0/24' }));
    expect(err.message).to.match(
      /10\.96\.0\.0\/24 of network "default" overlaps pool 10\.96\.0\.0\/26 of network "second"/,
    );
    expect(def.report(), 'nothing added').to.deep.equal([]);
    // The next /26 is free.
    expect(def.addPool({ cidr: '10.96.0.64/26' })).to.equal(true);
    expect(def.allocate()[0]!.address).to.equal('10.96.0.66');
    // The other way round too: the second network may not grow into the default network's pool.
    refused(() => set.get('second').allocator.addPool({ cidr: '10.96.0.64/27' }));
  });

  it('frees a range for another network only once its pool is gone, not while it drains', () => {
    const set = networkSet([], ['10.96.1.0/26']);
    const def = set.get('default').allocator;
    const second = set.get('second').allocator;
    def.addPool({ cidr: '10.96.0.0/24' });
    const [ip] = def.allocate();
    expect(def.drainPool('10.96.0.0/24')).to.equal('draining');
    // Its address in use stays the default network's: no other network may take the range meanwhile.
    refused(() => second.addPool({ cidr: '10.96.0.0/25' }));
    def.release([ip!.address]);
    expect(def.stateOf('10.96.0.0/24'), 'removed with its last address').to.equal(undefined);
    expect(second.addPool({ cidr: '10.96.0.0/25' })).to.equal(true);
  });
});
