import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { NodeRecord } from '../../../core/peer-source';
import { StaticPeerSource, type StaticPeerSourceOptions } from '../../../sources/static/static-peer-source';
import { silentLogger } from '../../../core/logger';
import { tunnelEndpoint } from '../support/node-records';

// The static peer source routes an entry's prefix only inside the cluster ranges, over no underlay
// address, no range of this node and no prefix another entry holds; the incumbent keeps its prefix,
// the newcomer's is refused and named in `rejected`, and the entry's other prefixes stay routed.

const SELF: NodeRecord = { node: 'n1', underlay: ['192.0.2.1'], mtu: 1500, bootId: 'b1' };

function entry(node: string, octet: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    node,
    underlay: [`192.0.2.${octet}`],
    vtep: { mac: `0e:77:c0:00:02:0${octet}`, vni: 30574, port: 4789 },
    prefixes: [`10.244.${octet}.0/24`],
    ...extra,
  };
}

describe('static peer source: which prefixes it routes', () => {
  let dir: string;
  let file: string;
  let source: StaticPeerSource | undefined;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-peers-prefixes-'));
    file = path.join(dir, 'peers.json');
  });
  afterEach(async () => {
    await source?.stop();
    source = undefined;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const write = (peers: unknown[]): void => {
    fs.writeFileSync(`${file}.tmp`, JSON.stringify({ peers }));
    fs.renameSync(`${file}.tmp`, file);
  };

  async function started(peers: unknown[], opts: StaticPeerSourceOptions = {}): Promise<StaticPeerSource> {
    write(peers);
    source = new StaticPeerSource(file, silentLogger(), { pollMs: 60_000, ...opts });
    await source.start(SELF);
    return source;
  }

  const prefixes = (s: StaticPeerSource): Record<string, string[]> =>
    Object.fromEntries([...s.peers()].map(([node, p]) => [node, p.prefixes]));

  it("refuses a prefix covering the underlay's /16 and keeps the entry's other prefix", async () => {
    const s = await started([
      entry('n1', 1),
      entry('n2', 2),
      entry('n3', 3, { prefixes: ['10.244.3.0/24', '192.0.0.0/16'] }),
    ]);
    expect(prefixes(s)).to.deep.equal({ n2: ['10.244.2.0/24'], n3: ['10.244.3.0/24'] });
    expect(s.status().rejected).to.deep.equal([
      `peers file ${file}: peers[2] (node n3).prefixes: 192.0.0.0/16 covers the underlay address 192.0.2.1 ` +
        "of this node; prefix not routed, the entry's other prefixes are",
    ]);
    expect(s.status().ready).to.equal(true);
  });

  it("refuses a prefix covering another peer's or a peer DPU's underlay address", async () => {
    const s = await started([
      entry('n2', 2, { prefixes: ['10.244.2.0/24', '198.51.100.0/24'] }),
      entry('n3', 3, { underlay: ['198.51.100.3'] }),
    ]);
    expect(prefixes(s)).to.deep.equal({ n2: ['10.244.2.0/24'], n3: ['10.244.3.0/24'] });
    expect(s.status().rejected.join('\n')).to.contain(
      '198.51.100.0/24 covers the underlay address 198.51.100.3 of node n3',
    );
  });

  it("keeps the incumbent's /24 when a newcomer lists a /31 inside it, listed first or not, and routes the /31 once the /24 goes", async () => {
    const s = await started([entry('n2', 2)]);
    const changed = new Promise<void>((resolve) => s.onChange(resolve));
    write([entry('n4', 4, { prefixes: ['10.244.4.0/24', '10.244.2.0/31'] }), entry('n2', 2)]);
    await s.reload();
    await changed;
    expect(prefixes(s)).to.deep.equal({ n4: ['10.244.4.0/24'], n2: ['10.244.2.0/24'] });
    expect(s.status().rejected).to.deep.equal([
      `peers file ${file}: peers[0] (node n4).prefixes: 10.244.2.0/31 overlaps 10.244.2.0/24, which node n2 ` +
        "holds; prefix not routed, the entry's other prefixes are",
    ]);
    // n2 leaves the file: what blocked the /31 is gone, so it is routed at once.
    write([entry('n4', 4, { prefixes: ['10.244.4.0/24', '10.244.2.0/31'] })]);
    await s.reload();
    expect(prefixes(s)).to.deep.equal({ n4: ['10.244.4.0/24', '10.244.2.0/31'] });
    expect(s.status().rejected).to.deep.equal([]);
  });

  it('gives a prefix listed for two new entries in one read to the one listed first, and refuses it to the other', async () => {
    const s = await started([entry('n3', 3, { prefixes: ['10.244.2.0/24'] }), entry('n2', 2)]);
    expect(prefixes(s)).to.deep.equal({ n3: ['10.244.2.0/24'], n2: [] });
    expect(s.status().rejected).to.deep.equal([
      `peers file ${file}: peers[1] (node n2).prefixes: 10.244.2.0/24 overlaps 10.244.2.0/24, which node n3 ` +
        "holds; prefix not routed, the entry's other prefixes are",
    ]);
  });

  it('refuses a prefix outside the cluster ranges', async () => {
    const s = await started([entry('n2', 2, { prefixes: ['10.244.2.0/24', '10.9.0.0/24'] })], {
      clusterCidrs: ['10.244.0.0/16'],
    });
    expect(prefixes(s)).to.deep.equal({ n2: ['10.244.2.0/24'] });
    expect(s.status().rejected).to.deep.equal([
      `peers file ${file}: peers[0] (node n2).prefixes: 10.9.0.0/24 is outside the cluster ranges ` +
        "(fabric.clusterCidrs: 10.244.0.0/16); prefix not routed, the entry's other prefixes are",
    ]);
  });

  it("refuses a prefix over this node's own range: its own entry's and its configured pools", async () => {
    const s = await started(
      [
        entry('n1', 1),
        entry('n2', 2, { prefixes: ['10.244.2.0/24', '10.244.1.128/25'] }),
        entry('n3', 3, { prefixes: ['10.244.3.0/24', '10.88.0.0/24'] }),
      ],
      { ownRanges: ['10.88.0.0/16'] },
    );
    expect(prefixes(s)).to.deep.equal({ n2: ['10.244.2.0/24'], n3: ['10.244.3.0/24'] });
    const rejected = s.status().rejected.join('\n');
    expect(rejected).to.contain("10.244.1.128/25 overlaps this node's own range 10.244.1.0/24");
    expect(rejected).to.contain("10.88.0.0/24 overlaps this node's own range 10.88.0.0/16");
  });

  it("refuses a newcomer whose underlay address lies inside the incumbent's prefix, not the incumbent's prefix", async () => {
    const s = await started([entry('n2', 2)]);
    write([entry('n2', 2), entry('n5', 5, { underlay: ['10.244.2.7'] })]);
    await s.reload();
    expect(prefixes(s)).to.deep.equal({ n2: ['10.244.2.0/24'] });
    expect(s.status().rejected).to.deep.equal([
      `peers file ${file}: peers[1] (node n5): not routed: its underlay address 10.244.2.7 lies inside ` +
        '10.244.2.0/24, which node n2 holds',
    ]);
  });

  it("narrows a DPU's slices to the entry's routed prefixes", async () => {
    const dpu = tunnelEndpoint('d0', 50, ['10.244.4.0/25', '10.244.2.0/26']);
    const s = await started([
      entry('n2', 2),
      entry('n4', 4, { prefixes: ['10.244.4.0/24', '10.244.2.0/24'], endpoints: [dpu] }),
    ]);
    expect(s.peers().get('n4')?.endpoints?.[0]?.prefixes).to.deep.equal(['10.244.4.0/25']);
    expect(s.status().rejected.join('\n')).to.contain('endpoint d0 claims 10.244.2.0/26');
  });
});
