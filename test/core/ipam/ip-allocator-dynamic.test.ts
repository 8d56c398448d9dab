import { expect } from 'chai';
import * as fc from 'fast-check';
import { WorkloadNetError } from '../../../core/errors';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { IpPool } from '../../../core/ipam/ip-pool';

// Pools that a pool source adds and drains while the daemon runs.

function code(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return err instanceof WorkloadNetError ? err.code : 'not a WorkloadNetError';
  }
  return undefined;
}

describe('IpAllocator with dynamic pools', () => {
  it('adds a pool and hands out from it', () => {
    const a = new IpAllocator([]);
    expect(a.configured).to.equal(false);
    expect(a.addPool({ cidr: '10.1.0.0/29' })).to.equal(true);
    expect(a.addPool({ cidr: '10.1.0.0/29' }), 'already active').to.equal(false);
    expect(a.allocate().map((i) => i.address)).to.deep.equal(['10.1.0.2']);
  });

  it('refuses a pool that overlaps one present, changing nothing', () => {
    const a = new IpAllocator([{ cidr: '10.1.0.0/24' }]);
    expect(code(() => a.addPool({ cidr: '10.1.0.64/26' }))).to.equal('INVALID_ARGUMENT');
    expect(a.usage().map((u) => u.cidr)).to.deep.equal(['10.1.0.0/24']);
  });

  it('removes an empty pool at once when it is drained', () => {
    const a = new IpAllocator([{ cidr: '10.1.0.0/29' }, { cidr: '10.2.0.0/29' }]);
    expect(a.drainPool('10.1.0.0/29')).to.equal('removed');
    expect(a.drainPool('10.9.0.0/29')).to.equal('absent');
    expect(a.usage().map((u) => u.cidr)).to.deep.equal(['10.2.0.0/29']);
  });

  it('keeps a draining pool serving its addresses in use, hands out none, and removes it after the last release', () => {
    const a = new IpAllocator([{ cidr: '10.1.0.0/29' }]);
    const [held] = a.allocate();
    a.addPool({ cidr: '10.2.0.0/29' });
    expect(a.drainPool('10.1.0.0/29')).to.equal('draining');
    expect(a.report().map((p) => [p.cidr, p.state, p.used])).to.deep.equal([
      ['10.1.0.0/29', 'draining', 1],
      ['10.2.0.0/29', 'active', 0],
    ]);
    for (let i = 0; i < 5; i++) expect(a.allocate()[0]!.pool.text).to.equal('10.2.0.0/29');
    expect(a.poolFor(held!.address)?.isUsed(held!.address)).to.equal(true);
    a.release([held!.address]);
    expect(a.stateOf('10.1.0.0/29')).to.equal(undefined);
  });

  it('reactivates a draining pool that is added again', () => {
    const a = new IpAllocator([{ cidr: '10.1.0.0/29' }]);
    a.allocate();
    a.drainPool('10.1.0.0/29');
    expect(code(() => a.allocate())).to.equal('RESOURCE_EXHAUSTED');
    expect(a.addPool({ cidr: '10.1.0.0/29' })).to.equal(true);
    expect(a.stateOf('10.1.0.0/29')).to.equal('active');
    expect(a.allocate()[0]!.address).to.equal('10.1.0.3');
  });

  it('setPools adds the listed pools and drains every other one', () => {
    const a = new IpAllocator([]);
    a.setPools([{ cidr: '10.1.0.0/29' }, { cidr: 'fd00::/120' }]);
    a.allocate();
    a.setPools([{ cidr: '10.3.0.0/29' }]);
    expect(a.report().map((p) => [p.cidr, p.state])).to.deep.equal([
      ['10.1.0.0/29', 'draining'],
      ['fd00::/120', 'draining'],
      ['10.3.0.0/29', 'active'],
    ]);
    expect(
      a.allocate().map((i) => i.family),
      'only families with an active pool',
    ).to.deep.equal([4]);
  });

  it('allocates exactly the families asked for, failing when one has no active pool', () => {
    const a = new IpAllocator([{ cidr: '10.1.0.0/29' }]);
    expect(code(() => a.allocate([4, 6]))).to.equal('RESOURCE_EXHAUSTED');
    expect(a.usage()[0]!.used, 'nothing taken').to.equal(0);
    a.addPool({ cidr: 'fd00::/120' });
    expect(a.allocate([4, 6]).map((i) => i.family)).to.deep.equal([4, 6]);
  });

  it('holds an address restored before its pool exists, and never hands it out once the pool appears', () => {
    const a = new IpAllocator([]);
    expect(code(() => a.markUsed('10.1.0.2'))).to.equal('INVALID_ARGUMENT');
    a.addPool({ cidr: '10.1.0.0/29' });
    const handed = [];
    for (let i = 0; i < 4; i++) handed.push(a.allocate()[0]!.address);
    expect(handed).to.not.include('10.1.0.2');
    expect(code(() => a.allocate())).to.equal('RESOURCE_EXHAUSTED');
  });

  it('tells its listener about every change of usage and pools', () => {
    const a = new IpAllocator([]);
    let calls = 0;
    a.onChange(() => calls++);
    a.addPool({ cidr: '10.1.0.0/29' });
    const [ip] = a.allocate();
    a.release([ip!.address]);
    a.drainPool('10.1.0.0/29');
    expect(calls).to.equal(4);
  });

  it('tells its pool listeners when a pool comes or goes, never of usage, each of them', () => {
    const a = new IpAllocator([]);
    const seen: string[][] = [[], []];
    for (const log of seen)
      a.onPoolsChange(() =>
        log.push(
          a
            .allPools()
            .map((p) => p.cidr.text)
            .join(),
        ),
      );
    a.addPool({ cidr: '10.1.0.0/29' });
    a.addPool({ cidr: '10.1.0.0/29' });
    const [ip] = a.allocate();
    a.drainPool('10.1.0.0/29');
    a.release([ip!.address]);
    a.addPool({ cidr: '10.2.0.0/29' });
    for (const log of seen) expect(log).to.deep.equal(['10.1.0.0/29', '', '10.2.0.0/29']);
  });

  it('counts free addresses of active pools only', () => {
    const a = new IpAllocator([{ cidr: '10.1.0.0/29', wholeBlock: true }, { cidr: '10.2.0.0/29' }]);
    expect(a.freeIn(4)).to.equal(8 + 5);
    a.allocate();
    a.drainPool('10.1.0.0/29');
    expect(a.freeIn(4)).to.equal(5);
  });

  it('never hands out one address twice under random adds, drains and releases (property)', () => {
    const cidrs = ['10.1.0.0/29', '10.1.0.8/29', '10.1.0.16/29'];
    const op = fc.oneof(
      fc.record({ kind: fc.constant('add' as const), i: fc.nat(2) }),
      fc.record({ kind: fc.constant('drain' as const), i: fc.nat(2) }),
      fc.record({ kind: fc.constant('alloc' as const) }),
      fc.record({ kind: fc.constant('release' as const), i: fc.nat(40) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const a = new IpAllocator([]);
        const held: string[] = [];
        for (const o of ops) {
          if (o.kind === 'add') a.addPool({ cidr: cidrs[o.i]!, wholeBlock: true });
          else if (o.kind === 'drain') a.drainPool(cidrs[o.i]!);
          else if (o.kind === 'release' && held.length > 0) a.release(held.splice(o.i % held.length, 1));
          else if (o.kind === 'alloc') {
            try {
              const [ip] = a.allocate();
              expect(held).to.not.include(ip!.address);
              expect(a.stateOf(ip!.pool.text)).to.equal('active');
              held.push(ip!.address);
            } catch (err) {
              if (!(err instanceof WorkloadNetError)) throw err;
            }
          }
          // Every held address stays held in a pool that is still there.
          for (const h of held) expect(a.poolFor(h)?.isUsed(h), h).to.equal(true);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('IpPool as a whole block', () => {
  it('hands out every address of the block, network and broadcast included', () => {
    const p = new IpPool('10.1.0.64/26', [], { wholeBlock: true });
    expect(p.size).to.equal(64);
    const got = new Set<string>();
    for (let i = 0; i < 64; i++) got.add(p.allocate());
    expect(got.has('10.1.0.64') && got.has('10.1.0.65') && got.has('10.1.0.127')).to.equal(true);
  });

  it('still withholds reserved addresses', () => {
    const p = new IpPool('10.1.0.0/26', ['10.1.0.0'], { wholeBlock: true });
    expect(p.size).to.equal(63);
    expect(p.allocate()).to.equal('10.1.0.1');
  });
});
