import { expect } from 'chai';
import { peerNodeOf } from '../../../backends/dpu/fabric-plan';
import { PEER_ERROR_MAX, PeerStateBook } from '../../../backends/dpu/peer-state-book';
import type { PeerState } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { SeededRandom } from '../../support/seeded-random';
import { deltaStatus as delta, peerState as state, wholeStatus as whole } from '../../support/peer-status';

/** A book open for session "s1", which was sent every peer name. */
const opened = (): PeerStateBook => {
  const book = new PeerStateBook(peerNodeOf);
  book.open({ session: 's1', sent: (name) => name.startsWith('peer/') });
  return book;
};

describe('DPU backend: an agent’s word on its peers (PeerStateBook)', () => {
  it('replaces itself with a whole PeerStatus and changes only what a delta names', () => {
    const book = opened();
    expect(book.apply(whole([state('peer/a'), state('peer/b'), state('peer/b/d1')]))).to.equal(true);
    expect([...book.nodes()].sort()).to.deep.equal(['a', 'b']);
    expect([...book.statesOf('b')!.keys()].sort()).to.deep.equal(['peer/b', 'peer/b/d1']);

    expect(book.apply(delta([state('peer/a', false)], ['peer/b/d1']))).to.equal(true);
    expect(book.get('peer/a')?.reachable).to.equal(false);
    expect(book.get('peer/b')?.reachable).to.equal(true);
    expect([...book.statesOf('b')!.keys()]).to.deep.equal(['peer/b']);

    expect(book.apply(whole([state('peer/b')]))).to.equal(true);
    expect([...book.nodes()]).to.deep.equal(['b']);
    expect(book.size).to.equal(1);
  });

  it('keeps the held object and its revision when a PeerStatus says the same', () => {
    const book = opened();
    book.apply(whole([state('peer/a', true, 3)]));
    const held = book.get('peer/a');
    const rev = book.revision;
    expect(book.apply(whole([state('peer/a', true, 3)]))).to.equal(false);
    expect(book.apply(delta([state('peer/a', true, 3)], ['peer/never']))).to.equal(false);
    expect(book.get('peer/a')).to.equal(held);
    expect(book.revision).to.equal(rev);
    expect(book.movedSince(rev)?.size).to.equal(0);
  });

  it('names the nodes moved since a revision, and gives up past what it keeps', () => {
    const book = opened();
    book.apply(whole([state('peer/a'), state('peer/b'), state('peer/c')]));
    const r1 = book.revision;
    book.apply(delta([state('peer/a', false)]));
    book.apply(delta([], ['peer/c']));
    expect([...book.movedSince(r1)!].sort()).to.deep.equal(['a', 'c']);
    expect([...book.movedSince(r1 + 1)!]).to.deep.equal(['c']);
    for (let i = 0; i < 40; i++) book.apply(delta([state('peer/b', true, i + 1)]));
    expect(book.movedSince(r1), 'too far back').to.equal(undefined);
    expect([...book.movedSince(book.revision - 3)!]).to.deep.equal(['b']);
    book.clear();
    expect(book.size).to.equal(0);
    expect([...book.movedSince(book.revision - 1)!].sort()).to.deep.equal(['a', 'b']);
  });

  it('drops and counts the entries naming peers its session was never sent, and keeps the others', () => {
    const sent = new Set(['peer/a', 'peer/b/d1']);
    const told: Array<[number, string]> = [];
    const book = new PeerStateBook(peerNodeOf);
    book.open({ session: 's1', sent: (n) => sent.has(n), unsent: (n, first) => told.push([n, first]) });
    const strangers = Array.from({ length: 1000 }, (_, i) => state(`peer/stranger${i}`));
    expect(book.apply(whole([state('peer/a'), ...strangers]))).to.equal(true);
    expect(book.apply(delta([state('peer/b/d1'), state('peer/x/y'), state('route/10.0.0.0/8')]))).to.equal(
      true,
    );
    expect([...book.values()].map((p) => p.name).sort()).to.deep.equal(['peer/a', 'peer/b/d1']);
    expect([...book.nodes()].sort()).to.deep.equal(['a', 'b']);
    expect(book.unsent).to.equal(1002);
    expect(told).to.deep.equal([
      [1000, 'peer/stranger0'],
      [2, 'peer/x/y'],
    ]);
    // A message of strangers only changes nothing.
    const rev = book.revision;
    expect(book.apply(delta(strangers))).to.equal(false);
    expect(book.revision).to.equal(rev);
    expect(book.size).to.equal(2);
  });

  it('forgets its session’s word when that session ends, and takes none until the next one opens', () => {
    const book = opened();
    book.apply(whole([state('peer/a'), state('peer/b')]));
    const rev = book.revision;
    book.close('another session');
    expect(book.size, 'another session’s end changes nothing').to.equal(2);
    book.close('s1');
    expect(book.size).to.equal(0);
    expect([...book.nodes()]).to.deep.equal([]);
    expect(book.session).to.equal(undefined);
    expect([...book.movedSince(rev)!].sort(), 'readers see both nodes move').to.deep.equal(['a', 'b']);

    // A lost agent's word is no evidence: a late message is not taken.
    expect(book.apply(whole([state('peer/a')]))).to.equal(false);
    expect(book.size).to.equal(0);
    expect(book.unsent).to.equal(1);

    book.open({ session: 's2', sent: () => true });
    expect(book.apply(whole([state('peer/a')]))).to.equal(true);
    expect(book.size).to.equal(1);
  });

  it('cuts an agent’s long last error short', () => {
    const book = opened();
    book.apply(whole([{ ...state('peer/a'), lastError: 'e'.repeat(100_000) }]));
    const kept = book.get('peer/a')?.lastError ?? '';
    expect(kept.length).to.be.lessThan(PEER_ERROR_MAX + 40);
    expect(kept).to.match(/… \(99744 more characters\)$/);
    // The same long error again is the same state.
    const rev = book.revision;
    expect(book.apply(whole([{ ...state('peer/a'), lastError: 'e'.repeat(100_000) }]))).to.equal(false);
    expect(book.revision).to.equal(rev);
  });

  it('holds what a from-scratch replay holds, after 300 random runs of whole and delta messages', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const seeded = new SeededRandom(seed);
      const rnd = (): number => seeded.next();
      const book = opened();
      let model = new Map<string, PeerState>();
      let seenRevision = book.revision;
      let seenNodes = new Map<string, string>();
      const names = Array.from({ length: 12 }, (_, i) =>
        i % 3 === 2 ? `peer/n${i % 5}/x` : `peer/n${i % 5}`,
      );
      const pick = (): PeerState =>
        state(names[Math.floor(rnd() * names.length)]!, rnd() < 0.5, Math.floor(rnd() * 3));
      for (let step = 0; step < 30; step++) {
        if (rnd() < 0.3) {
          const peers = Array.from({ length: Math.floor(rnd() * 6) }, pick);
          book.apply(whole(peers));
          model = new Map(peers.map((p) => [p.name, p]));
        } else {
          const gone = names.filter(() => rnd() < 0.1);
          const peers = Array.from({ length: Math.floor(rnd() * 3) }, pick);
          book.apply(delta(peers, gone));
          for (const g of gone) model.delete(g);
          for (const p of peers) model.set(p.name, p);
        }
        const have = [...book.values()].map((p) => JSON.stringify(p)).sort();
        const want = [...model.values()].map((p) => JSON.stringify(p)).sort();
        expect(have, `seed ${seed} step ${step}`).to.deep.equal(want);
        // What each node holds now, and whether movedSince() names every node whose content moved.
        const nodes = new Map<string, string>();
        for (const node of book.nodes())
          nodes.set(
            node,
            JSON.stringify([...book.statesOf(node)!.values()].sort((x, y) => (x.name < y.name ? -1 : 1))),
          );
        const moved = book.movedSince(seenRevision);
        if (moved)
          for (const node of new Set([...nodes.keys(), ...seenNodes.keys()]))
            if (nodes.get(node) !== seenNodes.get(node))
              expect(moved.has(node), `seed ${seed} step ${step}: ${node} moved`).to.equal(true);
        seenRevision = book.revision;
        seenNodes = nodes;
      }
    }
  });
});
