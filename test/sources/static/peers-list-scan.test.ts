import { expect } from 'chai';
import { scanPeersList } from '../../../sources/static/peers-list-scan';

// The scan that finds a peers file's entries without parsing it: each range it gives must be exactly
// one entry's text, and anything not of the file's plain shape must give undefined (the file is then
// parsed whole, which names the fault).

const texts = (s: string): string[] | undefined => {
  const b = Buffer.from(s, 'utf8');
  const ranges = scanPeersList(b);
  if (!ranges) return undefined;
  const out: string[] = [];
  for (let i = 0; i < ranges.length; i += 2) out.push(b.toString('utf8', ranges[i], ranges[i + 1]));
  return out;
};

describe('peers list scan', () => {
  it('gives each entry as its own text, whatever the white space', () => {
    const a = { node: 'n2', prefixes: ['10.0.0.0/24'] };
    const b = { node: 'n3', vtep: { mac: '0e:77:00:00:00:03' } };
    for (const text of [JSON.stringify({ peers: [a, b] }), JSON.stringify({ peers: [a, b] }, null, 2)]) {
      const got = texts(text);
      expect(got).to.have.length(2);
      expect(got?.map((t) => JSON.parse(t) as unknown)).to.deep.equal([a, b]);
    }
    expect(texts(' { "peers" : [ ] } \n')).to.deep.equal([]);
  });

  it('follows strings: braces, brackets, escaped quotes and multi-byte characters inside them', () => {
    const tricky = { node: 'n2', bootId: 'a "}]{[" \\ ü €' };
    const got = texts(JSON.stringify({ peers: [tricky, { node: 'n3' }] }));
    expect(got?.map((t) => JSON.parse(t) as unknown)).to.deep.equal([tricky, { node: 'n3' }]);
  });

  for (const [what, text] of [
    ['another key first', '{"nodes":[],"peers":[]}'],
    ['another key after', '{"peers":[],"nodes":[]}'],
    ['an entry that is not an object', '{"peers":[1]}'],
    ['an unclosed entry', '{"peers":[{"node":"n2"]}'],
    ['an unclosed string', '{"peers":[{"node":"n2}]}'],
    ['text after the object', '{"peers":[]} x'],
    ['no comma between entries', '{"peers":[{} {}]}'],
    ['a trailing comma', '{"peers":[{},]}'],
    ['not an object', '[]'],
  ] as const)
    it(`gives nothing for ${what}`, () => {
      expect(texts(text)).to.equal(undefined);
    });
});
