import { expect } from 'chai';
import type { FabricReport, PeerPath, PeerProbe, PeerSeenBy } from '../../../core/fabric-dataplane';
import type { Peer } from '../../../core/peer-source';
import { PeerRows } from '../../../core/fabric/peer-rows';
import type { Withdrawal } from '../../../core/fabric/withdrawal-grace';
import { peer } from '../../support/recording-fabric-dataplane';
import { DPU_ENDPOINT as endpoint } from '../../support/fabric-fixtures';

// The peer rows of Status: made again only when what a row shows changed, so that one peer's change at
// 5,000 peers costs one row; and what moves between applies (probes, the DPUs' PeerStatus) put on at
// view time.

const report = (paths: PeerPath[]): FabricReport => ({
  ready: true,
  reasons: [],
  peers: paths,
  objects: { routes: 0, neighbours: 0, fdb: 0 },
  repairs: 0,
});
const vxlan = (p: Peer): PeerPath => ({ node: p.node, path: 'vxlan', prefixes: [...p.prefixes] });
const none = new Map<string, Withdrawal>();

describe('peer rows', () => {
  let clock: number;
  let rows: PeerRows;
  beforeEach(() => {
    clock = 5_000;
    rows = new PeerRows({ graceMs: 180_000, now: () => clock });
  });

  it("keeps an unchanged peer's row and its last change; a changed record or path makes a new row and moves it", async () => {
    const [a, b] = [peer('n2', 2), peer('n3', 3)] as [Peer, Peer];
    const first = rows.update([a, b], [report([vxlan(a), vxlan(b)])], none);
    await new Promise((r) => setTimeout(r, 5));
    // A new report whose paths are new objects with the same content, and b's record changed.
    const b2 = { ...b, mtu: 9000 };
    const second = rows.update([a, b2], [report([vxlan(a), vxlan(b2)])], none);
    expect(second[0], 'the unchanged peer keeps its row').to.equal(first[0]);
    expect(second[1]).to.not.equal(first[1]);
    expect((second[1]?.lastChange ?? '') > (first[1]?.lastChange ?? '')).to.equal(true);
    await new Promise((r) => setTimeout(r, 5));
    // The same record given again as a new object of the same shape: not a change.
    const third = rows.update(
      [{ ...a }, b2],
      [report([vxlan(a), { ...vxlan(b2), path: 'unreachable', reason: 'gone' }])],
      none,
    );
    expect(third[0]?.lastChange).to.equal(first[0]?.lastChange);
    expect(third[1]?.path).to.equal('unreachable');
    expect(third[1]?.reason).to.equal('gone');
    expect((third[1]?.lastChange ?? '') > (second[1]?.lastChange ?? '')).to.equal(true);
    expect(rows.count('unreachable')).to.equal(1);
    expect(rows.count('vxlan')).to.equal(1);
  });

  it("shows a peer's DPU endpoints, and at view time its probes and how this node's DPUs see it now", () => {
    const a: Peer = { ...peer('n2', 2), endpoints: [endpoint] };
    const b = peer('n3', 3);
    rows.update([a, b], [report([vxlan(a), vxlan(b)])], none);
    const seen: PeerSeenBy = {
      endpoint: 'dpu-a',
      reachable: true,
      offloaded: true,
      txPackets: 3,
      rxPackets: 4,
      lastError: '',
    };
    const probe: PeerProbe = {
      state: 'reachable',
      target: '10.244.3.0',
      lost: 0,
      answered: true,
      since: 'x',
    };
    // PeerStatus came after the apply: the report of now says it, the rows made at apply do not.
    const view = rows.view([report([{ ...vxlan(a), seenBy: [seen] }, vxlan(b)])], new Map([['n3', probe]]));
    expect(view[0]?.endpoints).to.deep.equal([endpoint]);
    expect(view[0]?.seenBy).to.deep.equal([seen]);
    expect(view[0]?.probe).to.equal(undefined);
    expect(view[1]?.probe).to.deep.equal(probe);
    expect(view[1]?.seenBy).to.equal(undefined);
    // The rows themselves are not changed by a view.
    expect(rows.rows[0]?.seenBy).to.equal(undefined);
  });

  it('says a withdrawing peer is kept by the grace and since when, and forgets a peer that left the table', () => {
    const [a, b] = [peer('n2', 2), peer('n3', 3)] as [Peer, Peer];
    rows.update([a, b], [report([vxlan(a), vxlan(b)])], none);
    clock += 1_000;
    const leaving = new Map<string, Withdrawal>([['n3', { peer: b, since: clock - 500 }]]);
    const kept = rows.update([a, b], [report([vxlan(a), vxlan(b)])], leaving);
    expect(kept[1]?.reason).to.contain('left the peer source; kept for the withdrawal grace (180 s)');
    expect(Date.parse(kept[1]?.withdrawnAt ?? '')).to.be.within(Date.now() - 1_500, Date.now());
    const gone = rows.update([a], [report([vxlan(a)])], none);
    expect(gone.map((r) => r.node)).to.deep.equal(['n2']);
    expect(rows.count('vxlan')).to.equal(1);
  });

  it('names a peer the dataplane did not report', () => {
    const a = peer('n2', 2);
    const [row] = rows.update([a], [report([])], none);
    expect(row?.path).to.equal('unreachable');
    expect(row?.reason).to.equal('not in the last report of the dataplane');
    expect(row?.prefixes).to.deep.equal(a.prefixes);
  });
});
