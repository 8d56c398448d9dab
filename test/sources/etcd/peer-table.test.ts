import { expect } from 'chai';
import { blockLayout } from '../../../sources/etcd/block-layout';
import { PeerTable } from '../../../sources/etcd/peer-table';

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

/** An alive key's value as a daemon writes it (alive-key.ts); `stamps` false: a daemon of an earlier version. */
const alive = (store: string, boot: string, stamps = true): string =>
  JSON.stringify({
    store,
    boot,
    host: `host-of-${store}`,
    pid: 42,
    since: '2026-01-01T00:00:00.000Z',
    ...(stamps ? { stampsRecord: true } : {}),
  });

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

  it("uses a held name's record only when its stamp names the holder, keeps the last one that did meanwhile, and lets a record of a name nobody holds stand", () => {
    const t = new PeerTable('self', layouts);
    const stamp = { store: 's1', boot: 'b1' };
    t.put('blocks/10.96.0.64-26', 'a', '0');
    t.put('nodes/a/alive', alive('s1', 'b1'), '99');
    t.put('nodes/a', record('a', { holder: stamp }), LEASE);
    t.recompute();
    const before = t.peers().get('a');
    expect(before?.underlay).to.deep.equal(['192.0.2.97']);
    expect(t.rejected()).to.deep.equal([]);
    const held =
      "node name a's holder, the daemon of store s1 on host host-of-s1 (pid 42, since 2026-01-01T00:00:00.000Z) (its alive key)";
    const stays =
      ", and the node's daemon is alive: its last record stays in use until it writes its own again; record ignored";
    // Leased records of other writers: unstamped (an older daemon, another program), stamped by
    // another daemon (a clone on another boot, or the same boot with other state), unreadable.
    const foreign: Array<[string, string]> = [
      [
        record('a', { underlay: ['192.0.2.66'] }),
        `node a: its record names no daemon that wrote it, but ${held}, which stamps every record it writes: ` +
          `an older daemon given the same name, or another program, wrote this one${stays}`,
      ],
      [
        record('a', { underlay: ['192.0.2.66'], holder: { store: 's1', boot: 'b2' } }),
        `node a: its record was written by the daemon of store s1 (boot b2), not by ${held}${stays}`,
      ],
      [
        record('a', { underlay: ['192.0.2.66'], holder: { store: 's2', boot: 'b1' } }),
        `node a: its record was written by the daemon of store s2 (boot b1), not by ${held}${stays}`,
      ],
      ['{broken', `node a: its record is not JSON, so it is not the record of ${held}${stays}`],
    ];
    for (const [value, why] of foreign) {
      t.put('nodes/a', value, '1234');
      expect(t.recompute(), 'no change for the fabric').to.equal(false);
      expect(t.peers().get('a')).to.deep.equal(before);
      expect(t.rejected()).to.deep.equal([why]);
    }
    // A full list that finds the foreign record keeps the last good one too.
    t.clear();
    t.put('blocks/10.96.0.64-26', 'a', '0');
    t.put('nodes/a/alive', alive('s1', 'b1'), '99');
    t.put('nodes/a', record('a', { underlay: ['192.0.2.66'] }), '1234');
    expect(t.recompute()).to.equal(false);
    expect(t.peers().get('a')).to.deep.equal(before);
    // The holder writes its own back (an alive key with other host and pid is the same daemon: the
    // stamp is compared on store and boot).
    t.put('nodes/a/alive', JSON.stringify({ boot: 'b1', store: 's1', stampsRecord: true }), '99');
    t.put('nodes/a', record('a', { mtu: 1450, holder: stamp }), LEASE);
    t.recompute();
    expect(t.peers().get('a')?.mtu).to.equal(1450);
    expect(t.rejected()).to.deep.equal([]);
    // The daemon stops (its alive key goes, its record stays until its lease expires): still routed.
    t.delete('nodes/a/alive');
    expect(t.recompute()).to.equal(false);
    expect(t.peers().get('a')?.mtu).to.equal(1450);
    // With no holder, a leased record stands whoever wrote it, as before stamps: its lease ends it.
    t.put('nodes/a', record('a', { underlay: ['192.0.2.66'], holder: { store: 's2', boot: 'b2' } }), '1234');
    t.recompute();
    expect(t.peers().get('a')?.underlay).to.deep.equal(['192.0.2.66']);
    t.delete('nodes/a');
    t.recompute();
    expect(t.peers().has('a')).to.equal(false);
  });

  it('routes the unstamped records of a daemon of an earlier version, whose alive key does not say it stamps, through a rolling upgrade', () => {
    const t = new PeerTable('self', layouts);
    t.put('blocks/10.96.0.64-26', 'a', '0');
    t.put('nodes/a/alive', alive('s1', 'b1', false), '99');
    t.put('nodes/a', record('a'), LEASE);
    t.recompute();
    expect(t.peers().get('a')?.underlay).to.deep.equal(['192.0.2.97']);
    expect(t.rejected()).to.deep.equal([]);
    // A newer daemon that does not hold the name is still refused: its stamp names another.
    t.put('nodes/a', record('a', { underlay: ['192.0.2.66'], holder: { store: 's2', boot: 'b2' } }), '1234');
    t.recompute();
    expect(t.peers().get('a')?.underlay).to.deep.equal(['192.0.2.97']);
    expect(t.rejected().join('\n')).to.match(/was written by the daemon of store s2 \(boot b2\), not by/);
    t.put('nodes/a', record('a'), LEASE);
    t.recompute();
    // The node's daemon is upgraded: it takes the name, its old record (unstamped) is no longer its
    // holder's, the node stays routed by it until the new daemon writes its own.
    t.put('nodes/a/alive', alive('s1', 'b1'), '100');
    expect(t.recompute()).to.equal(false);
    expect(t.peers().get('a')?.underlay).to.deep.equal(['192.0.2.97']);
    expect(t.rejected().join('\n')).to.match(/names no daemon that wrote it/);
    t.put('nodes/a', record('a', { mtu: 1450, holder: { store: 's1', boot: 'b1' } }), LEASE);
    t.recompute();
    expect(t.peers().get('a')?.mtu).to.equal(1450);
    expect(t.rejected()).to.deep.equal([]);
  });
});
