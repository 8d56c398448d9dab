import { expect } from 'chai';
import { AgentFabricIndex } from '../../../backends/dpu/agent-fabric-index';
import { RouteVia, type FabricObject } from '../../../proto/gen/workloadnet/dpu/v1/dpu';

// The per-node index of one agent's fabric objects, kept object by object: after any sequence of
// objects added, replaced and removed it must say what an index made from scratch of the objects held
// says (the way it was made before), and a node nothing moved for keeps the same prefix list.

function fromScratch(objects: readonly FabricObject[]): {
  peers: Set<string>;
  byNode: Map<string, string[]>;
} {
  const peers = new Set<string>();
  const nodeOf = new Map<string, string>();
  const byNode = new Map<string, Set<string>>();
  for (const o of objects)
    if (o.peer) {
      peers.add(o.name);
      nodeOf.set(o.name, o.peer.node);
      if (!byNode.has(o.peer.node)) byNode.set(o.peer.node, new Set());
    }
  for (const o of objects) {
    const node = o.peerRoute && nodeOf.get(o.peerRoute.peer);
    if (node !== undefined && o.peerRoute) byNode.get(node)?.add(o.peerRoute.prefix);
  }
  return { peers, byNode: new Map([...byNode].map(([n, s]) => [n, [...s].sort()])) };
}

const fabricPeer = (name: string, node: string): FabricObject => ({
  name,
  generation: 1,
  peer: { node, endpoint: '', address: '192.0.2.9', mac: '0e:77:00:00:00:09', vni: 1, port: 4789 },
});
const route = (prefix: string, peer: string): FabricObject => ({
  name: `route/${prefix}`,
  generation: 1,
  peerRoute: { prefix, peer, via: RouteVia.ROUTE_VIA_ENCAP, mtu: 1450 },
});

/** A small deterministic generator, so that a failure can be run again. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('agent fabric index', () => {
  it('says what an index made from scratch says, after 300 runs of random changes', () => {
    for (let run = 0; run < 300; run++) {
      const rnd = random(run + 1);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
      const index = new AgentFabricIndex();
      const held = new Map<string, FabricObject>();
      const nodes = ['n1', 'n2', 'n3', 'n4'];
      const peerNames = ['peer/n1', 'peer/n2', 'peer/n3', 'peer/n2/d0', 'peer/n4/d1', 'peer/gone'];
      for (let step = 0; step < 40; step++) {
        const r = rnd();
        let next: FabricObject | undefined;
        if (r < 0.35) next = fabricPeer(pick(peerNames), pick(nodes));
        else if (r < 0.75) next = route(`10.${Math.floor(rnd() * 6)}.0.0/24`, pick(peerNames));
        if (next) {
          // FabricDesired's order: the old object out, the new one in.
          const old = held.get(next.name);
          if (old) index.remove(old);
          index.add(next);
          held.set(next.name, next);
        } else if (held.size > 0) {
          const name = pick([...held.keys()]);
          index.remove(held.get(name) as FabricObject);
          held.delete(name);
        }
        const want = fromScratch([...held.values()]);
        expect(index.peerCount, `run ${run} step ${step}`).to.equal(want.peers.size);
        for (const name of peerNames) expect(index.hasPeer(name)).to.equal(want.peers.has(name));
        for (const node of nodes)
          expect(index.prefixesOf(node), `run ${run} step ${step} node ${node}`).to.deep.equal(
            want.byNode.get(node),
          );
      }
    }
  });

  it("keeps a node's prefix list while nothing of it moves", () => {
    const index = new AgentFabricIndex();
    for (const o of [
      fabricPeer('peer/n2', 'n2'),
      route('10.2.0.0/24', 'peer/n2'),
      fabricPeer('peer/n3', 'n3'),
    ])
      index.add(o);
    const before = index.prefixesOf('n2');
    index.add(route('10.3.0.0/24', 'peer/n3'));
    expect(index.prefixesOf('n2')).to.equal(before);
    expect(index.prefixesOf('n3')).to.deep.equal(['10.3.0.0/24']);
    index.add(route('10.2.1.0/24', 'peer/n2'));
    expect(index.prefixesOf('n2')).to.deep.equal(['10.2.0.0/24', '10.2.1.0/24']);
  });
});
