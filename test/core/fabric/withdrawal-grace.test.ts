import { expect } from 'chai';
import type { Peer } from '../../../core/peer-source';
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

  it('never withdraws the only peer because the source lists none (an empty list is no evidence)', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    g.table(listOf(peer(1)));
    expect(names(g.table(new Map()))).to.deep.equal(['n1']);
    t = 100 * GRACE;
    expect(names(g.table(new Map()))).to.deep.equal(['n1']);
    expect(g.disruption()?.kind).to.equal('stopped');
    expect(g.nextDue()).to.equal(undefined);
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
  it('keeps a prefix a listed peer no longer announces for the grace, then withdraws it', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    const three = range(3);
    g.table(listOf(...three));
    // n2's block key is deleted: n2 is still listed, without its prefix.
    const shrunk = listOf(peer(1), peer(2, []), peer(3));
    expect(g.table(shrunk).find((p) => p.node === 'n2')?.prefixes).to.deep.equal(['10.244.2.0/24']);
    expect(g.keptPrefixes('n2')?.has('10.244.2.0/24')).to.equal(true);
    expect(g.nextDue()).to.equal(GRACE);
    t = GRACE - 1;
    expect(g.table(shrunk).find((p) => p.node === 'n2')?.prefixes).to.deep.equal(['10.244.2.0/24']);
    t = GRACE;
    expect(g.table(shrunk).find((p) => p.node === 'n2')?.prefixes).to.deep.equal([]);
    expect(g.keptPrefixes('n2')).to.equal(undefined);
  });

  it('forgets a lost prefix announced again, and gives one at once to a listed peer announcing it', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    g.table(listOf(...range(4)));
    g.table(listOf(peer(1), peer(2, []), peer(3, []), peer(4)));
    // n2 announces its prefix again; n3's goes to a new node n5.
    const table = g.table(listOf(peer(1), peer(2), peer(3, []), peer(4), peer(5, ['10.244.3.0/25'])));
    expect(g.keptPrefixes('n2')).to.equal(undefined);
    expect(table.find((p) => p.node === 'n3')?.prefixes, 'the listed owner wins').to.deep.equal([]);
    t = GRACE;
    expect(
      g.table(listOf(peer(1), peer(2), peer(3, []), peer(4))).find((p) => p.node === 'n2')?.prefixes,
    ).to.deep.equal(['10.244.2.0/24']);
  });

  it("keeps a lost prefix's DPU slices with it", () => {
    const g = new WithdrawalGrace(GRACE, clock);
    const vtep = { mac: '0e:77:0a:64:01:32', vni: 30574, port: 4789 };
    const endpoint = { id: 'd0', underlay: '10.100.1.50', mtu: 1500, vtep, prefixes: ['10.244.2.0/26'] };
    const withDpu = { ...peer(2, ['10.244.2.0/24', '10.244.12.0/24']), endpoints: [endpoint] };
    g.table(listOf(peer(1), withDpu, peer(3)));
    const lost = { ...peer(2, ['10.244.12.0/24']), endpoints: [{ ...endpoint, prefixes: [] }] };
    const n2 = g.table(listOf(peer(1), lost, peer(3))).find((p) => p.node === 'n2');
    expect(n2?.prefixes).to.deep.equal(['10.244.12.0/24', '10.244.2.0/24']);
    expect(n2?.endpoints?.[0]?.prefixes).to.deep.equal(['10.244.2.0/26']);
  });

  it('slows prefix losses like departures when most peers lose prefixes at once, and stops while none is listed', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    const ten = range(10);
    g.table(listOf(...ten));
    // Six of ten block keys deleted by hand.
    const six = listOf(...ten.map((p, i) => (i < 6 ? peer(i + 1, []) : p)));
    g.table(six);
    expect(g.disruption()?.kind).to.equal('slowed');
    t = GRACE;
    const kept = (): number => g.table(six).filter((p) => p.prefixes.length > 0).length;
    expect(kept(), 'one unit withdrawn per grace period').to.equal(9);
    // Every block key deleted: no listed peer announces a prefix; nothing is withdrawn.
    const none = listOf(...range(10).map((p) => peer(Number(p.node.slice(1)), [])));
    t = 10 * GRACE;
    g.table(none);
    t = 20 * GRACE;
    expect(g.table(none).filter((p) => p.prefixes.length > 0)).to.have.length(9);
    expect(g.disruption()?.kind).to.equal('stopped');
  });

  it('withdraws at once a peer, or a lost prefix, whose peer never proved itself', () => {
    const g = new WithdrawalGrace(GRACE, clock);
    g.table(listOf(...range(4)));
    const unproven = (node: string): boolean => node === 'n3' || node === 'n4';
    const table = g.table(listOf(peer(1), peer(2), peer(4, [])), { unproven });
    expect(names(table)).to.deep.equal(['n1', 'n2', 'n4']);
    expect(table.find((p) => p.node === 'n4')?.prefixes).to.deep.equal([]);
    expect(g.withdrawnUnproven()).to.deep.equal(['n3']);
  });
});
