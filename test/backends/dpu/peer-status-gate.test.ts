import { expect } from 'chai';
import { peerNodeOf } from '../../../backends/dpu/fabric-plan';
import { PeerStateBook } from '../../../backends/dpu/peer-state-book';
import { PeerStatusGate, type PeerStatusGateOptions } from '../../../backends/dpu/peer-status-gate';
import type { PeerState } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { SeededRandom } from '../../support/seeded-random';
import { deltaStatus as delta, peerState as state, wholeStatus as whole } from '../../support/peer-status';

const book = (): PeerStateBook => {
  const b = new PeerStateBook(peerNodeOf);
  b.open({ session: 's', sent: () => true });
  return b;
};
const held = (b: PeerStateBook): string[] => [...b.values()].map((p) => JSON.stringify(p)).sort();

const OPTS: PeerStatusGateOptions = {
  perInterval: 1,
  burst: 2,
  floodLimit: 1000,
  floodWindowIntervals: 10,
  maxHeldBytes: 1024 * 1024,
};

describe('DPU backend: the PeerStatus rate (PeerStatusGate)', () => {
  it('passes messages within the rate, and folds those over it into one passed once the rate allows', () => {
    let t = 0;
    const gate = new PeerStatusGate(100, OPTS, () => t);
    expect(gate.offer(whole([state('peer/a'), state('peer/b')]))).to.not.equal(undefined);
    expect(gate.offer(delta([state('peer/a', false)]))).to.not.equal(undefined);
    expect(gate.offer(delta([state('peer/c')], ['peer/b']))).to.equal(undefined);
    expect(gate.offer(delta([state('peer/b', true, 4)], ['peer/c']))).to.equal(undefined);
    expect(gate.due(), 'no token yet').to.equal(undefined);
    expect(gate.takeHeld()).to.equal(2);
    t = 100;
    const fold = gate.due();
    expect(fold?.delta).to.equal(true);
    expect(fold?.peers.map((p) => [p.name, p.txPackets])).to.deep.equal([['peer/b', 4]]);
    expect([...(fold?.gone ?? [])].sort()).to.deep.equal(['peer/b', 'peer/c']);
    expect(gate.due(), 'nothing held any more').to.equal(undefined);
    expect(gate.flood).to.equal(undefined);
  });

  it('leaves a book where the messages one by one would, after 300 random runs at any rate', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const seeded = new SeededRandom(seed);
      const rnd = (): number => seeded.next();
      let t = 0;
      const gate = new PeerStatusGate(100, OPTS, () => t);
      const direct = book();
      const gated = book();
      const names = Array.from({ length: 10 }, (_, i) => `peer/n${i % 4}${i > 5 ? '/d' : ''}`);
      const pick = (): PeerState =>
        state(names[Math.floor(rnd() * names.length)]!, rnd() < 0.5, Math.floor(rnd() * 3));
      for (let step = 0; step < 40; step++) {
        t += Math.floor(rnd() * 60);
        const ps =
          rnd() < 0.2
            ? whole(Array.from({ length: Math.floor(rnd() * 5) }, pick))
            : delta(
                Array.from({ length: Math.floor(rnd() * 3) }, pick),
                names.filter(() => rnd() < 0.15),
              );
        direct.apply(ps);
        const passed = gate.offer(ps);
        if (passed) gated.apply(passed);
        if (rnd() < 0.2) {
          const due = gate.due();
          if (due) gated.apply(due);
        }
      }
      t += 1000;
      const last = gate.due();
      if (last) gated.apply(last);
      expect(held(gated), `seed ${seed}`).to.deep.equal(held(direct));
    }
  });

  it('says the stream should end on a sustained flood, as a heartbeat flood does', () => {
    let t = 0;
    const gate = new PeerStatusGate(100, { ...OPTS, floodLimit: 50 }, () => t);
    let passed = 0;
    for (let i = 0; i < 200 && !gate.flood; i++) {
      t += 1;
      if (gate.offer(delta([state(`peer/n${i}`)]))) passed++;
    }
    expect(passed).to.be.lessThan(5);
    expect(gate.flood).to.match(/^PeerStatus flood: 50 messages over the limit of 1 per 100 ms$/);
    t += 10_000;
    expect(gate.due(), 'nothing is passed on after a flood').to.equal(undefined);
  });

  it('says the stream should end when what it holds outweighs a whole message', () => {
    const t = 0;
    const gate = new PeerStatusGate(100, { ...OPTS, maxHeldBytes: 100_000 }, () => t);
    gate.offer(delta([]));
    gate.offer(delta([]));
    for (let i = 0; i < 20 && !gate.flood; i++)
      gate.offer(delta(Array.from({ length: 100 }, (_, j) => state(`peer/x${i}-${j}`))));
    expect(gate.flood).to.match(/held back over the rate came to more than 100000 bytes/);
  });
});
