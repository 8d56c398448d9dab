import { expect } from 'chai';
import { StreamedJsonArray, StreamedTable, json, table, type TextSink } from '../../cli/output';

// The writers `workloadnet ls` prints with as rows arrive: what they print must be what the whole-table
// functions printed for the same rows, so that streaming changes nothing a script reads.

/** Collects what is written; says "full" after `fullAfter` writes, like a pipe whose reader lags. */
class Collector implements TextSink {
  text = '';
  writes = 0;
  constructor(private readonly fullAfter = Infinity) {}
  write(t: string): boolean {
    this.text += t;
    return ++this.writes < this.fullAfter;
  }
}

const HEADERS = ['WORKLOAD', 'POD', 'STATE'];
const rows = (n: number, wide = 0): string[][] =>
  Array.from({ length: n }, (_, i) => [`w-${i}`, i === wide ? 'a-much-longer-pod-name' : `p${i}`, 'ready']);

describe('StreamedJsonArray', () => {
  const values: unknown[] = [
    { workloadId: 'a', result: { ips: [{ cidr: '10.0.0.2/32' }], ip: ['10.0.0.2'] }, raw: Buffer.from([1]) },
    { workloadId: 'b', pod: { name: 'line\nbreak', labels: {} }, list: [] },
    { workloadId: 'c', nested: [[1, { x: null }]] },
  ];

  for (const n of [0, 1, 3]) {
    it(`writes the text json() writes for the whole array of ${n}, an element at a time`, () => {
      const out = new Collector();
      const array = new StreamedJsonArray(out);
      for (const v of values.slice(0, n)) array.element(v);
      array.end();
      expect(out.text).to.equal(json(values.slice(0, n)));
      expect(out.writes).to.equal(n + 1);
    });
  }

  it('leaves the array open, not valid JSON, until it is ended', () => {
    const out = new Collector();
    const array = new StreamedJsonArray(out);
    array.element(values[0]);
    expect(() => JSON.parse(out.text) as unknown).to.throw();
  });
});

describe('StreamedTable', () => {
  it('prints up to its sizing rows exactly as table() does, all at the end', () => {
    const out = new Collector();
    const t = new StreamedTable(out, HEADERS, 5);
    for (const r of rows(4, 2)) t.row(r);
    expect(out.text).to.equal('');
    t.end();
    expect(out.text).to.equal(table(HEADERS, rows(4, 2)));
  });

  it('prints the sizing rows once they are in, then each row as it comes', () => {
    const out = new Collector();
    const t = new StreamedTable(out, HEADERS, 3);
    const all = rows(5, 9);
    for (const r of all.slice(0, 3)) t.row(r);
    expect(out.text).to.equal(table(HEADERS, all.slice(0, 3)));
    t.row(all[3] ?? []);
    expect(out.text.trimEnd().split('\n')).to.have.length(5);
    t.row(all[4] ?? []);
    t.end();
    // Rows narrower than the sizing rows print in the same columns as one whole table would.
    expect(out.text).to.equal(table(HEADERS, all));
  });

  it('widens a column from the row with a wider cell on, keeping the rows above as printed', () => {
    const out = new Collector();
    const t = new StreamedTable(out, HEADERS, 2);
    const all = rows(4, 3);
    for (const r of all) t.row(r);
    t.end();
    const lines = out.text.trimEnd().split('\n');
    expect(lines.slice(0, 3).join('\n') + '\n').to.equal(table(HEADERS, all.slice(0, 2)));
    expect(lines[3]).to.equal('w-2        p2    ready');
    expect(lines[4]).to.equal('w-3        a-much-longer-pod-name   ready');
  });

  it('passes on the sink’s "full", so the caller can wait for it to drain', () => {
    const out = new Collector(1);
    const t = new StreamedTable(out, HEADERS, 2);
    expect(t.row(['a', 'b', 'c'])).to.equal(true);
    expect(t.row(['d', 'e', 'f'])).to.equal(false);
  });
});
