import { expect } from 'chai';
import { PeersFileReader } from '../../../sources/static/peers-file';
import type { Peer } from '../../../core/peer-source';
import { SeededRandom } from '../../support/seeded-random';

// The reader that keeps what each entry was read as, against a fresh reader of the same bytes: after
// any run of edits (entries added, removed, changed, moved, the layout changed, files refused), it must
// give the same table and the same refusals, and hand out the same Peer object for an entry whose text
// did not change.

interface Entry {
  node: string;
  underlay: string[];
  prefixes: string[];
  mtu?: number;
}

const entry = (n: number, mtu?: number): Entry => ({
  node: `n${n}`,
  underlay: [`10.0.${Math.floor(n / 250)}.${(n % 250) + 1}`],
  prefixes: [`10.244.${n % 250}.0/24`],
  ...(mtu ? { mtu } : {}),
});

type Outcome = { peers: Map<string, Peer>; rejected: unknown[] } | { error: string };

function readWith(reader: PeersFileReader, text: string): Outcome {
  try {
    return reader.read(Buffer.from(text, 'utf8'), 'peers.json');
  } catch (err) {
    return { error: (err as Error).message };
  }
}

const shown = (o: Outcome): unknown =>
  'error' in o
    ? o
    : { peers: [...o.peers.entries()].map(([k, p]) => [k, JSON.stringify(p)]), rejected: o.rejected };

describe('peers file reader: what it keeps between reads', () => {
  it('reads what a fresh reader reads, after 200 random runs of edits, and keeps unchanged entries as they were', () => {
    for (let seed = 1; seed <= 200; seed++) {
      const seeded = new SeededRandom(seed);
      const rnd = (): number => seeded.next();
      const reader = new PeersFileReader();
      let list: Entry[] = Array.from({ length: 8 }, (_, i) => entry(i));
      let next = 8;
      let before = new Map<string, { text: string; peer: Peer }>();
      let layoutBefore: number | undefined;
      for (let step = 0; step < 25; step++) {
        const r = rnd();
        const at = Math.floor(rnd() * (list.length + 1));
        if (r < 0.2) list.splice(at, 0, entry(next++));
        else if (r < 0.4 && list.length > 0) list.splice(at % list.length, 1);
        else if (r < 0.55 && list.length > 0)
          list[at % list.length] = { ...list[at % list.length]!, mtu: 1400 + step };
        else if (r < 0.65 && list.length > 1) list = [...list.slice(1), list[0]!];
        else if (r < 0.72 && list.length > 0)
          list.splice(at, 0, { ...list[at % list.length]! }); // listed twice
        else if (r < 0.78) list.push({ ...entry(next++), prefixes: [list[0]?.prefixes[0] ?? '10.9.9.0/24'] });
        const layout = rnd() < 0.2 ? 2 : undefined;
        const text = JSON.stringify({ peers: list }, null, layout);
        const kept = readWith(reader, text);
        const fresh = readWith(new PeersFileReader(), text);
        expect(shown(kept), `seed ${seed} step ${step}`).to.deep.equal(shown(fresh));
        if ('error' in kept) {
          // A refused file leaves the list as it was for the next edit (a person fixes it).
          list = list.filter((e, i) => list.findIndex((x) => x.node === e.node) === i);
          list = list.filter((e, i) => list.findIndex((x) => x.prefixes[0] === e.prefixes[0]) === i);
          continue;
        }
        // An entry's text includes its white space: only a read of the same layout can know it.
        if (layout !== layoutBefore) before = new Map();
        layoutBefore = layout;
        const now = new Map<string, { text: string; peer: Peer }>();
        for (const e of list) now.set(e.node, { text: JSON.stringify(e), peer: kept.peers.get(e.node)! });
        for (const [node, { text: t, peer }] of now) {
          const was = before.get(node);
          if (was && was.text === t)
            expect(peer, `seed ${seed} step ${step}: ${node} unchanged keeps its record`).to.equal(was.peer);
        }
        before = now;
      }
    }
  });
});
