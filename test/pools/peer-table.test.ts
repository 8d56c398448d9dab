import { expect } from 'chai';
import { blockLayout } from '../../pools/etcd/block-layout';
import { PeerTable } from '../../pools/etcd/peer-table';

// The peer table works out only the nodes a change touches: whatever the order of changes, it must
// end where a table built from the final keys in one go ends.

const layouts = [blockLayout('10.96.0.0/24', 26), blockLayout('fd96::/120', 26)];
const BLOCKS = [
  '10.96.0.0-26',
  '10.96.0.64-26',
  '10.96.0.128-26',
  '10.96.0.192-26',
  'fd96::-122',
  'fd96::40-122',
];
const NODES = ['self', 'a', 'b', 'c'];
/** A lease as a daemon writes its record under (the value matters only as not '0'). */
const LEASE = '7587';

const record = (node: string, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({
    node,
    underlay: [`192.0.2.${node.charCodeAt(0) % 250}`],
    mtu: 1500,
    bootId: 'x',
    ...extra,
  });

const dpu = (prefix: string): Record<string, unknown> => ({
  id: 'dpu-0',
  underlay: '192.0.2.200',
  mtu: 1500,
  vtep: { mac: '0e:77:c0:00:02:c8', vni: 30574, port: 4789 },
  prefixes: [prefix],
});

/** A small deterministic random source (xorshift), so a failure can be replayed. */
function rng(seed: number): () => number {
  let x = seed || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

function fresh(keys: Map<string, string>): PeerTable {
  const t = new PeerTable('self', layouts);
  for (const [k, v] of keys) t.put(k, v, LEASE);
  t.recompute();
  return t;
}

describe('etcd peer table', () => {
  it('ends where a table built from the final keys ends, whatever the order of changes', () => {
    for (let seed = 1; seed <= 200; seed++) {
      const r = rng(seed);
      const keys = new Map<string, string>();
      const t = new PeerTable('self', layouts);
      for (let step = 0; step < 40; step++) {
        const roll = r();
        let key: string;
        let value: string | undefined;
        if (roll < 0.4) {
          key = `blocks/${pick(r, BLOCKS)}`;
          value = r() < 0.7 ? pick(r, NODES) : undefined;
        } else if (roll < 0.8) {
          const node = pick(r, NODES);
          key = `nodes/${node}`;
          const kind = r();
          value =
            kind < 0.2
              ? undefined
              : kind < 0.35
                ? record(node, { prefixes: ['10.96.0.64/26'] })
                : kind < 0.45
                  ? '{broken'
                  : kind < 0.6
                    ? // A DPU's slice, valid only while the node owns the block it lies in.
                      record(node, { endpoints: [dpu(pick(r, ['10.96.0.64/28', '10.96.0.128/28']))] })
                    : record(node, { mtu: 1400 + Math.floor(r() * 3) });
        } else if (roll < 0.9) {
          key = `blocks/${pick(r, ['0.0.0.0-0', '10.97.0.0-26', 'junk'])}`;
          value = pick(r, NODES);
        } else {
          key = `nodes/${pick(r, NODES)}/alive`;
          value = '{}';
        }
        if (value === undefined) {
          keys.delete(key);
          t.delete(key);
        } else {
          keys.set(key, value);
          t.put(key, value, LEASE);
        }
        if (r() < 0.5) t.recompute();
      }
      t.recompute();
      const want = fresh(keys);
      expect([...t.peers()].sort(), `seed ${seed}`).to.deep.equal([...want.peers()].sort());
      expect([...t.rejected()].sort(), `seed ${seed}`).to.deep.equal([...want.rejected()].sort());
      expect([...t.unrouted()].sort(), `seed ${seed}`).to.deep.equal([...want.unrouted()].sort());
      expect(t.peers().has('self')).to.equal(false);
    }
  });

  it('hands out tables that never change under their holder, and says when the table changed', () => {
    const t = new PeerTable('self', layouts);
    t.put('blocks/10.96.0.64-26', 'a', LEASE);
    t.put('nodes/a', record('a'), LEASE);
    expect(t.recompute()).to.equal(true);
    const before = t.peers();
    t.put('blocks/10.96.0.128-26', 'a', LEASE);
    expect(t.recompute()).to.equal(true);
    expect(before.get('a')!.prefixes).to.deep.equal(['10.96.0.64/26']);
    expect(t.peers().get('a')!.prefixes).to.deep.equal(['10.96.0.64/26', '10.96.0.128/26']);
    // The same record written again, an alive key, our own record: no change for the fabric.
    t.put('nodes/a', record('a'), LEASE);
    t.put('nodes/a/alive', '{}', LEASE);
    t.put('nodes/self', record('self'), LEASE);
    expect(t.recompute()).to.equal(false);
  });

  it('keeps its peers on a full list that says the same, and drops what the list no longer has', () => {
    const t = new PeerTable('self', layouts);
    t.put('blocks/10.96.0.64-26', 'a', LEASE);
    t.put('nodes/a', record('a'), LEASE);
    t.put('nodes/b', record('b'), LEASE);
    t.recompute();
    t.clear();
    t.put('blocks/10.96.0.64-26', 'a', LEASE);
    t.put('nodes/a', record('a'), LEASE);
    expect(t.recompute()).to.equal(true);
    expect([...t.peers().keys()]).to.deep.equal(['a']);
  });

  it("keeps a live node's last leased record over one written without a lease, and routes no name by an unleased record alone", () => {
    const t = new PeerTable('self', layouts);
    t.put('blocks/10.96.0.64-26', 'a', '0');
    t.put('nodes/a', record('a'), LEASE);
    t.put('nodes/a/alive', '{}', '99');
    t.recompute();
    const before = t.peers().get('a');
    expect(before?.underlay).to.deep.equal(['192.0.2.97']);
    // Someone writes another underlay into a's key, without a lease.
    t.put('nodes/a', record('a', { underlay: ['192.0.2.66'] }), '0');
    expect(t.recompute(), 'no change for the fabric').to.equal(false);
    expect(t.peers().get('a')).to.deep.equal(before);
    expect(t.rejected()).to.deep.equal([
      'node a: its record was written without a lease (every daemon writes its record under one; a ' +
        "person or another program wrote this one), and the node's daemon is alive: its last record " +
        'stays in use until it writes its own again; record ignored',
    ]);
    // Its daemon writes its own again: in use, nothing reported.
    t.put('nodes/a', record('a', { mtu: 1450 }), LEASE);
    t.recompute();
    expect(t.peers().get('a')?.mtu).to.equal(1450);
    expect(t.rejected()).to.deep.equal([]);
    // Unleased again, and then the daemon is gone (its alive key expired): nothing left to route.
    t.put('nodes/a', record('a', { underlay: ['192.0.2.66'] }), '0');
    t.recompute();
    expect(t.peers().get('a')?.mtu).to.equal(1450);
    t.delete('nodes/a/alive');
    expect(t.recompute()).to.equal(true);
    expect(t.peers().has('a')).to.equal(false);
    // A name known by nothing but an unleased record and a block: not routed, and said why.
    t.put('blocks/10.96.0.128-26', 'b', '0');
    t.put('nodes/b', record('b'), '0');
    t.recompute();
    expect(t.peers().has('b')).to.equal(false);
    expect(t.rejected().join('\n')).to.match(
      /node b: its record was written without a lease .*; record ignored/,
    );
  });
});
