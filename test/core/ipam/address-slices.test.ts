import { expect } from 'chai';
import { cutRange } from '../../../core/ipam/address-slices';
import { isSliceCount } from '../../../core/fabric-config';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { IpPool } from '../../../core/ipam/ip-pool';
import { expectError } from '../../support/expect-error';

// How a pod range is cut into one slice per DPU, and how a cut pool hands out addresses inside one.

describe('address slices', () => {
  describe('cutting a range', () => {
    it('cuts an IPv4 range into equal aligned slices, in index order', () => {
      expect(cutRange('10.244.1.0/24', 4)).to.deep.equal({
        slices: ['10.244.1.0/26', '10.244.1.64/26', '10.244.1.128/26', '10.244.1.192/26'],
        size: 64,
      });
      expect(cutRange('10.244.0.0/16', 2).slices).to.deep.equal(['10.244.0.0/17', '10.244.128.0/17']);
    });

    it('cuts an IPv6 range; one larger than the tracked window is cut inside the window', () => {
      expect(cutRange('fd00:1::/120', 4).slices).to.deep.equal([
        'fd00:1::/122',
        'fd00:1::40/122',
        'fd00:1::80/122',
        'fd00:1::c0/122',
      ]);
      // A /64 pool hands out its first 2^20 addresses only: slices past them could never be used.
      expect(cutRange('fd00:2::/64', 4).slices).to.deep.equal([
        'fd00:2::/110',
        'fd00:2::4:0/110',
        'fd00:2::8:0/110',
        'fd00:2::c:0/110',
      ]);
    });

    it('keeps a range whole when its slices would hold fewer than 4 addresses, or for one slice', () => {
      expect(cutRange('10.0.0.0/29', 4).slices).to.deep.equal(['10.0.0.0/29']);
      expect(cutRange('10.0.0.0/28', 4).slices).to.deep.equal([
        '10.0.0.0/30',
        '10.0.0.4/30',
        '10.0.0.8/30',
        '10.0.0.12/30',
      ]);
      expect(cutRange('fd00::/125', 4).slices).to.deep.equal(['fd00::/125']);
      expect(cutRange('10.244.1.0/24', 1).slices).to.deep.equal(['10.244.1.0/24']);
      expect(cutRange('fd00:2::/64', 1).slices).to.deep.equal(['fd00:2::/64']);
    });

    it('accepts slice counts that are powers of two up to 256 only', () => {
      for (const n of [1, 2, 4, 8, 256]) expect(isSliceCount(n), String(n)).to.equal(true);
      for (const n of [0, 3, 6, 512, -4, 2.5, '4']) expect(isSliceCount(n), String(n)).to.equal(false);
    });
  });

  describe('a cut pool', () => {
    it('hands out addresses of one slice only, round-robin inside it, and counts them per slice', () => {
      const pool = new IpPool('10.244.1.0/24');
      pool.cut(4);
      expect(pool.sliceCount).to.equal(4);
      expect(pool.freeInSlice(2)).to.equal(64);
      expect(pool.freeInSlice(0), 'network and .1 withheld').to.equal(62);
      expect(pool.freeInSlice(3), 'broadcast withheld').to.equal(63);
      const a = pool.allocateInSlice(2);
      const b = pool.allocateInSlice(2);
      expect([a, b]).to.deep.equal(['10.244.1.128', '10.244.1.129']);
      pool.release(a);
      expect(pool.allocateInSlice(2), 'resumes after its own cursor').to.equal('10.244.1.130');
      expect(pool.usedInSlice(2)).to.equal(2);
      expect(pool.used).to.equal(2);
      expect(pool.sliceOf('10.244.1.130')).to.equal(2);
      expect(pool.allocate(), 'the whole-pool cursor is its own').to.equal('10.244.1.2');
    });

    it('reports a full slice and refuses to allocate in it while other slices have room', () => {
      const pool = new IpPool('10.0.0.0/28');
      pool.cut(4);
      expect(pool.allocateInSlice(1)).to.equal('10.0.0.4');
      for (let i = 0; i < 3; i++) pool.allocateInSlice(1);
      expect(pool.freeInSlice(1)).to.equal(0);
      expect(pool.free).to.be.greaterThan(0);
      expectError(() => pool.allocateInSlice(1), 'RESOURCE_EXHAUSTED');
      pool.release('10.0.0.6');
      expect(pool.allocateInSlice(1), 'wraps inside the slice').to.equal('10.0.0.6');
    });

    it('counts addresses already held when it is cut', () => {
      const pool = new IpPool('10.0.1.0/24');
      pool.markUsed('10.0.1.70');
      pool.markUsed('10.0.1.200');
      pool.cut(4);
      expect([0, 1, 2, 3].map((i) => pool.usedInSlice(i))).to.deep.equal([0, 1, 0, 1]);
    });

    it('an IPv6 window slice hands out addresses inside it', () => {
      const pool = new IpPool('fd00:2::/64');
      pool.cut(4);
      expect(pool.allocateInSlice(3)).to.equal('fd00:2::c:0');
      expect(pool.sliceCidr(3)).to.equal('fd00:2::c:0/110');
    });
  });

  describe('an allocator with cut pools', () => {
    it('cuts every pool, several ranges and those added later, and takes slice i of the first with room', () => {
      const alloc = new IpAllocator([{ cidr: '10.0.0.0/28' }, { cidr: 'fd00::/120' }]);
      alloc.cutSlices(4);
      alloc.addPool({ cidr: '10.0.1.0/24' });
      expect(alloc.allPools().map((p) => p.sliceCidr(1))).to.deep.equal([
        '10.0.0.4/30',
        'fd00::40/122',
        '10.0.1.64/26',
      ]);
      const req = { endpoint: 'dpu-b', slice: 1, strict: false };
      const first = alloc.allocate(undefined, req);
      expect(first.map((ip) => [ip.address, ip.borrowed ?? false])).to.deep.equal([
        ['10.0.0.4', false],
        ['fd00::40', false],
      ]);
      for (let i = 0; i < 3; i++) alloc.allocate([4], req);
      expect(alloc.allocate([4], req)[0]?.address, 'the next range of the family').to.equal('10.0.1.64');
    });

    it('keeps per-slice cursors in cursors() under the slice CIDR and restores them', () => {
      const alloc = new IpAllocator([{ cidr: '10.0.1.0/24' }]);
      alloc.cutSlices(4);
      const req = { endpoint: 'dpu-a', slice: 2, strict: false };
      alloc.allocate(undefined, req);
      alloc.allocate(undefined, req);
      const cursors = alloc.cursors();
      expect(cursors['10.0.1.128/26']).to.equal('10.0.1.129');
      const again = new IpAllocator([{ cidr: '10.0.1.0/24' }]);
      again.cutSlices(4);
      again.restoreCursors(cursors);
      expect(again.allocate(undefined, req)[0]?.address).to.equal('10.0.1.130');
    });
  });
});
