import { expect } from 'chai';
import fc from 'fast-check';
import { formatAddress, parseCidr } from '../../../lib/cidr';
import { expectError } from '../../support/expect-error';
import { IpAllocator, type PoolConfig } from '../../../core/ipam/ip-allocator';

/** Every address a pool may hand out, computed the naive way (all addresses minus the excluded ones). */
function usableAddresses(pool: PoolConfig): string[] {
  const c = parseCidr(pool.cidr);
  const count = 2 ** ((c.family === 4 ? 32 : 128) - c.prefixLength);
  const out: string[] = [];
  for (let i = 2; i < count; i++) {
    if (c.family === 4 && i === count - 1) continue;
    const a = formatAddress(c.family, c.network + BigInt(i));
    if (!(pool.reserved ?? []).includes(a)) out.push(a);
  }
  return out;
}

/** A new allocator rebuilt from what the store would hold: the held addresses and the saved cursors. */
function restart(old: IpAllocator, pools: PoolConfig[], held: Iterable<string>): IpAllocator {
  const fresh = new IpAllocator(pools);
  for (const a of held) fresh.markUsed(a);
  fresh.restoreCursors(old.cursors());
  return fresh;
}

describe('IpAllocator', () => {
  describe('configuration', () => {
    it('rejects overlapping pools of the same family', () => {
      expectError(
        () => new IpAllocator([{ cidr: '10.88.0.0/16' }, { cidr: '10.88.4.0/24' }]),
        'INVALID_ARGUMENT',
        /IP pools 10\.88\.0\.0\/16 and 10\.88\.4\.0\/24 overlap/,
      );
      expectError(
        () => new IpAllocator([{ cidr: 'fd00::/120' }, { cidr: 'fd00::/64' }]),
        'INVALID_ARGUMENT',
        /overlap/,
      );
      expectError(
        () => new IpAllocator([{ cidr: '10.0.0.0/24' }, { cidr: '10.0.0.0/24' }]),
        'INVALID_ARGUMENT',
        /overlap/,
      );
    });

    it('accepts adjacent pools, and pools of different families whose numbers coincide', () => {
      const a = new IpAllocator([{ cidr: '10.0.0.0/24' }, { cidr: '10.0.1.0/24' }, { cidr: '::/96' }]);
      expect(a.usage().map((u) => u.cidr)).to.deep.equal(['10.0.0.0/24', '10.0.1.0/24', '::/96']);
    });

    it('is not configured without pools and refuses to allocate with FAILED_PRECONDITION', () => {
      const a = new IpAllocator([]);
      expect(a.configured).to.equal(false);
      expectError(() => a.allocate(), 'FAILED_PRECONDITION', /no IP pool is configured/);
    });

    it('reports usage per pool in canonical form', () => {
      const a = new IpAllocator([{ cidr: '10.88.0.0/28' }, { cidr: 'FD00:0::/124', reserved: ['fd00::5'] }]);
      a.allocate();
      expect(a.usage()).to.deep.equal([
        { cidr: '10.88.0.0/28', family: 4, size: 13, used: 1 },
        { cidr: 'fd00::/124', family: 6, size: 13, used: 1 },
      ]);
    });
  });

  describe('allocation', () => {
    it('gives one address per family to a dual-stack attachment', () => {
      const a = new IpAllocator([{ cidr: 'fd00::/124' }, { cidr: '10.88.0.0/28' }]);
      const ips = a.allocate();
      expect(ips.map(({ family, address, pool }) => [family, address, pool.text])).to.deep.equal([
        [4, '10.88.0.2', '10.88.0.0/28'],
        [6, 'fd00::2', 'fd00::/124'],
      ]);
    });

    it('gives a single-stack attachment one address', () => {
      const ips = new IpAllocator([{ cidr: '10.88.0.0/28' }]).allocate();
      expect(ips.map((ip) => ip.address)).to.deep.equal(['10.88.0.2']);
    });

    it('keeps the IPv6 address free when IPv4 is exhausted (all or nothing)', () => {
      const a = new IpAllocator([{ cidr: '10.0.0.4/30' }, { cidr: 'fd00::/124' }]);
      a.allocate();
      const before = a.cursors();
      expectError(
        () => a.allocate(),
        'RESOURCE_EXHAUSTED',
        /no free IPv4 address.*10\.0\.0\.4\/30: 1 of 1 in use/,
      );
      expect(a.usage().map((u) => u.used)).to.deep.equal([1, 1]);
      expect(a.cursors()).to.deep.equal(before);
      expect(a.exhausted).to.equal(true);
    });

    it('keeps the IPv4 address free when IPv6 is exhausted (all or nothing)', () => {
      const a = new IpAllocator([{ cidr: '10.88.0.0/28' }, { cidr: 'fd00::/126' }]);
      a.allocate();
      a.allocate();
      const before = a.cursors();
      const err = expectError(
        () => a.allocate(),
        'RESOURCE_EXHAUSTED',
        /no free IPv6 address.*fd00::\/126: 2 of 2 in use/,
      );
      expect(err.retryable).to.equal(true);
      expect(a.usage().map((u) => u.used)).to.deep.equal([2, 2]);
      expect(a.cursors(), 'a failed allocation does not move the IPv4 cursor').to.deep.equal(before);
    });

    it('gives back what it took when a later family fails unexpectedly', () => {
      const a = new IpAllocator([{ cidr: '10.88.0.0/28' }, { cidr: 'fd00::/124' }]);
      const v6 = a.poolFor('fd00::2')!;
      v6.allocate = () => {
        throw new Error('boom');
      };
      expect(() => a.allocate()).to.throw('boom');
      expect(a.usage().map((u) => u.used)).to.deep.equal([0, 0]);
    });

    it('uses pools of one family in order, the first with space', () => {
      const a = new IpAllocator([{ cidr: '10.0.0.4/30' }, { cidr: '10.0.1.0/29' }]);
      expect(a.allocate()[0]!.address).to.equal('10.0.0.6');
      expect(a.allocate()[0]!.address).to.equal('10.0.1.2');
      a.release(['10.0.0.6']);
      expect(a.allocate()[0]!.address).to.equal('10.0.0.6');
      expect(a.exhausted).to.equal(false);
    });

    it('releases every address it knows, ignores foreign ones, and reports a malformed one after', () => {
      const a = new IpAllocator([{ cidr: '10.88.0.0/28' }, { cidr: 'fd00::/124' }]);
      const ips = a.allocate().map((ip) => ip.address);
      expectError(() => a.release(['not-an-ip', ...ips, '192.0.2.1']), 'INVALID_ARGUMENT', /not-an-ip/);
      expect(a.usage().map((u) => u.used)).to.deep.equal([0, 0]);
    });

    it('restores held addresses through the pool that contains them', () => {
      const a = new IpAllocator([{ cidr: '10.88.0.0/28' }, { cidr: 'fd00::/124' }]);
      a.markUsed('10.88.0.2');
      a.markUsed('fd00::2');
      expect(a.poolFor('fd00::2')!.isUsed('fd00::2')).to.equal(true);
      expect(a.poolFor('192.0.2.1')).to.equal(undefined);
      expectError(
        () => a.markUsed('192.0.2.1'),
        'INVALID_ARGUMENT',
        /none of the configured IP pools \(10\.88\.0\.0\/28, fd00::\/124\)/,
      );
      expect(a.allocate().map((ip) => ip.address)).to.deep.equal(['10.88.0.3', 'fd00::3']);
    });

    it('persists cursors per pool and skips stale ones on restore', () => {
      const a = new IpAllocator([{ cidr: '10.88.0.0/28' }, { cidr: 'fd00::/124' }]);
      expect(a.cursors()).to.deep.equal({});
      a.allocate();
      a.allocate();
      expect(a.cursors()).to.deep.equal({ '10.88.0.0/28': '10.88.0.3', 'fd00::/124': 'fd00::3' });

      const b = new IpAllocator([{ cidr: '10.88.0.0/28' }, { cidr: 'fd00::/124' }]);
      b.restoreCursors({
        '10.88.0.0/28': '10.88.0.9',
        'fd00::/124': '10.1.1.1',
        '10.99.0.0/16': '10.99.0.7',
      });
      expect(b.cursors()).to.deep.equal({ '10.88.0.0/28': '10.88.0.9' });
      expect(b.allocate().map((ip) => ip.address)).to.deep.equal(['10.88.0.10', 'fd00::2']);
    });
  });

  describe('properties', () => {
    const configs: PoolConfig[][] = [
      [{ cidr: '10.88.0.0/29' }, { cidr: 'fd00::/124', reserved: ['fd00::7', 'fd00::8'] }],
      [{ cidr: '10.88.0.0/30' }, { cidr: '10.88.1.0/29', reserved: ['10.88.1.4'] }, { cidr: 'fd00::/126' }],
      [{ cidr: '10.88.0.0/28', reserved: ['10.88.0.3'] }],
      [{ cidr: 'fd00:1::/124' }],
    ];
    type Op = { kind: 'allocate' } | { kind: 'release'; pick: number } | { kind: 'restart' };
    const op: fc.Arbitrary<Op> = fc.oneof(
      { arbitrary: fc.constant({ kind: 'allocate' as const }), weight: 4 },
      { arbitrary: fc.nat().map((pick) => ({ kind: 'release' as const, pick })), weight: 3 },
      { arbitrary: fc.constant({ kind: 'restart' as const }), weight: 1 },
    );

    it('never hands out an address twice while held, nor a reserved one, through allocate/release/restart', () => {
      fc.assert(
        fc.property(fc.constantFrom(...configs), fc.array(op, { maxLength: 60 }), (pools, ops) => {
          const usable = new Set(pools.flatMap(usableAddresses));
          const families = [...new Set(pools.map((p) => parseCidr(p.cidr).family))].sort();
          const capacity = (f: 4 | 6): number =>
            pools.filter((p) => parseCidr(p.cidr).family === f).flatMap(usableAddresses).length;
          let allocator = new IpAllocator(pools);
          const attachments: string[][] = [];
          const held = (): string[] => attachments.flat();

          for (const o of ops) {
            if (o.kind === 'allocate') {
              const full = families.some(
                (f) => held().filter((a) => a.includes(':') === (f === 6)).length === capacity(f),
              );
              expect(allocator.exhausted).to.equal(full);
              if (full) {
                const before = JSON.stringify(allocator.usage());
                expectError(() => allocator.allocate(), 'RESOURCE_EXHAUSTED');
                expect(JSON.stringify(allocator.usage())).to.equal(before);
                continue;
              }
              const ips = allocator.allocate();
              expect(ips.map((ip) => ip.family)).to.deep.equal(families);
              for (const ip of ips) {
                expect(usable.has(ip.address), `${ip.address} is not usable`).to.equal(true);
                expect(held(), `${ip.address} handed out twice`).to.not.include(ip.address);
                expect(ip.pool.family).to.equal(ip.family);
              }
              attachments.push(ips.map((ip) => ip.address));
            } else if (o.kind === 'release') {
              if (attachments.length === 0) continue;
              const [gone] = attachments.splice(o.pick % attachments.length, 1);
              allocator.release(gone!);
            } else {
              allocator = restart(allocator, pools, held());
            }
            const used = allocator.usage().reduce((n, u) => n + u.used, 0);
            expect(used).to.equal(held().length);
          }
        }),
        { numRuns: 300 },
      );
    });
  });
});
