import { expect } from 'chai';
import type { Peer } from '../../../core/fabric/peer-source';
import { WithdrawalGrace } from '../../../core/fabric/withdrawal-grace';

// The grace on its own clock: what stays programmed when peers leave the source one by one, many at
// once, all at once, across a restart, and when a range moves to a new node.

const GRACE = 1_000;

const peer = (i: number, prefixes = [`10.244.${i}.0/24`]): Peer => ({
  node: `n${i}`,
  underlay: [`10.100.1.${i}`],
  mtu: 1500,
  bootId: '',
  prefixes,
});

const listOf = (...ps: Peer[]): Map<string, Peer> => new Map(ps.map((p) => [p.node, p]));
const names = (t: readonly Peer[]): string[] => t.map((p) => p.node);
const range = (n: number): Peer[] => Array.from({ length: n }, (_, i) => peer(i + 1));

describe('withdrawal grace', () => {
  let t = 0;
  const clock = (): number => t;
  beforeEach(() => {
    t = 0;
  });

  it('removes a peer that left only after the grace', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    const ten = range(10);
    g.table(listOf(...ten));
    const nine = listOf(...ten.slice(1));
    expect(names(g.table(nine))).to.include('n1');
    t = GRACE - 1;
    expect(names(g.table(nine))).to.include('n1');
    t = GRACE;
    expect(names(g.table(nine))).to.not.include('n1');
    expect(g.disruption()).to.equal(undefined);
  });

  it('slows withdrawals to one per grace period when more than half the peers leave at once', () => {
    const g = new WithdrawalGrace({ graceMs: GRACE, maxShare: 0.5 }, clock);
    const ten = range(10);
    g.table(listOf(...ten));
    const four = listOf(...ten.slice(6)); // n1..n6 leave
    expect(g.table(four)).to.have.length(10);
    expect(g.disruption()?.kind).to.equal('slowed');
    expect(g.disruption()?.reason).to.include('6 of 10 peers left');
    t = GRACE;
    expect(g.table(four), 'one withdrawn at the end of the grace').to.have.length(9);
    expect(g.nextDue()).to.equal(2 * GRACE);
    t = GRACE + 10;
    expect(g.table(four), 'not a second one within the same period').to.have.length(9);
    t = 2 * GRACE;
    expect(g.table(four)).to.have.length(8);
    // 4 of 8 withdrawing is no longer more than half: the rest go at once.
    t = 3 * GRACE;
    expect(g.table(four)).to.have.length(4);
    expect(g.disruption()).to.equal(undefined);
  });

  it('with a grace of 0 withdraws every peer that left at once, however many (nothing to slow down to)', () => {
    const g = new WithdrawalGrace(0, clock);
    const all = range(2002);
    g.table(listOf(...all));
    t += 1;
    const left = g.table(listOf(...all.slice(0, 2)));
    expect(names(left)).to.deep.equal(['n1', 'n2']);
    expect(g.disruption()).to.equal(undefined);
    expect(g.pending().size).to.equal(0);
  });

  it('stops withdrawals while the source lists no peer at all', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    g.table(listOf(...range(3)));
    t = 100 * GRACE;
    g.table(new Map());
    t = 200 * GRACE;
    expect(names(g.table(new Map()))).to.deep.equal(['n1', 'n2', 'n3']);
    expect(g.disruption()?.kind).to.equal('stopped');
    expect(g.nextDue()).to.equal(undefined);
    // The source lists peers again: n1 is back; n2 and n3, missing for longer than the grace from a
    // source that works again, go.
    t = 201 * GRACE;
    const back = listOf(peer(1), ...range(12).slice(3));
    const after = names(g.table(back));
    expect(after).to.include('n1').and.not.include('n2').and.not.include('n3');
    expect(g.disruption()).to.equal(undefined);
  });

  it('keeps a single last peer that leaves for the grace, then removes it', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    g.table(listOf(peer(1)));
    expect(names(g.table(new Map()))).to.deep.equal(['n1']);
    t = GRACE;
    expect(g.table(new Map())).to.deep.equal([]);
  });

  it('gives the grace to peers programmed before a restart that the first list lacks', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    g.seed(range(3));
    const two = listOf(peer(1), peer(2));
    expect(names(g.table(two))).to.deep.equal(['n1', 'n2', 'n3']);
    expect(g.pending().has('n3')).to.equal(true);
    t = GRACE;
    expect(names(g.table(two))).to.deep.equal(['n1', 'n2']);
  });

  it('lets a listed node win a range still kept for a node that left', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    g.table(listOf(peer(1), peer(2), peer(3)));
    // n3's range goes to a new node n4 (and a /26 of it to n5) while n3 is within its grace.
    const table = g.table(listOf(peer(1), peer(2), peer(4, ['10.244.3.0/25']), peer(5, ['10.244.3.192/26'])));
    const n3 = table.find((p) => p.node === 'n3');
    expect(n3?.prefixes, "n3 keeps nothing that overlaps a listed node's range").to.deep.equal([]);
    expect(table.find((p) => p.node === 'n4')?.prefixes).to.deep.equal(['10.244.3.0/25']);
  });
});
