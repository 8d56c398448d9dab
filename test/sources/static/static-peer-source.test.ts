import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PeersFileReader, parsePeersFile, readPeersFile } from '../../../sources/static/peers-file';
import type { NodeRecord } from '../../../core/peer-source';
import { StaticPeerSource } from '../../../sources/static/static-peer-source';
import { silentLogger } from '../../../core/logger';
import { until } from '../../support/recording-fabric-dataplane';
import { tunnelEndpoint } from '../support/node-records';

// The static peer source: the peers a file lists, read again when it changes; a bad file changes
// nothing; this node's own entry is skipped.

const SELF: NodeRecord = { node: 'n1', underlay: ['192.0.2.1'], mtu: 1500, bootId: 'b1' };

function entry(node: string, octet: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    node,
    underlay: [`192.0.2.${octet}`],
    mtu: 1500,
    vtep: { mac: `0e:77:c0:00:02:0${octet}`, vni: 30574, port: 4789 },
    prefixes: [`10.244.${octet}.0/24`],
    bootId: '',
    ...extra,
  };
}

describe('static peer source', () => {
  let dir: string;
  let file: string;
  let source: StaticPeerSource | undefined;
  let changes: number;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-peers-'));
    file = path.join(dir, 'peers.json');
    changes = 0;
  });
  afterEach(async () => {
    await source?.stop();
    source = undefined;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** Writes the file the way config managers do: a new file renamed over the old one. */
  function write(doc: unknown): void {
    const tmp = `${file}.tmp`;
    fs.writeFileSync(tmp, typeof doc === 'string' ? doc : JSON.stringify(doc));
    fs.renameSync(tmp, file);
  }

  async function started(f = file, pollMs = 60_000): Promise<StaticPeerSource> {
    source = new StaticPeerSource(f, silentLogger(), { pollMs });
    source.onChange(() => changes++);
    await source.start(SELF);
    return source;
  }

  it('with no file is a synced, empty table', async () => {
    const s = await started('');
    expect(s.synced).to.equal(true);
    expect(s.peers().size).to.equal(0);
    expect(s.status()).to.deep.include({ kind: 'static', ready: true, reasons: [] });
  });

  it('lists the peers of the file, without this node', async () => {
    write({ peers: [entry('n1', 1), entry('n2', 2), entry('n3', 3)] });
    const s = await started();
    expect(s.synced).to.equal(true);
    expect([...s.peers().keys()]).to.deep.equal(['n2', 'n3']);
    expect(s.peers().get('n2')).to.deep.equal({
      node: 'n2',
      underlay: ['192.0.2.2'],
      mtu: 1500,
      vtep: { mac: '0e:77:c0:00:02:02', vni: 30574, port: 4789 },
      prefixes: ['10.244.2.0/24'],
      bootId: '',
    });
  });

  it('reads the file again when it is replaced, and says so', async () => {
    write({ peers: [entry('n2', 2)] });
    const s = await started();
    const before = changes;
    write({ peers: [entry('n2', 2), entry('n3', 3)] });
    await until(() => s.peers().size === 2, 10_000, 'the new table (watch)');
    expect(changes).to.be.greaterThan(before);
  });

  it('keeps the record of every entry that did not change, and gives a changed one a new record', async () => {
    write({ peers: [entry('n2', 2), entry('n3', 3), entry('n4', 4)] });
    const s = await started();
    const [n2, n3, n4] = ['n2', 'n3', 'n4'].map((n) => s.peers().get(n));
    const before = changes;
    // Moved in the list and one of them given another MTU.
    write({ peers: [entry('n4', 4), entry('n2', 2, { mtu: 9000 }), entry('n3', 3)] });
    await until(() => s.peers().get('n2')?.mtu === 9000, 10_000, 'the changed entry');
    expect(changes).to.equal(before + 1);
    // Downstream compares unchanged peers by identity (peer-shape.ts): they must be the same objects.
    expect(s.peers().get('n3')).to.equal(n3);
    expect(s.peers().get('n4')).to.equal(n4);
    expect(s.peers().get('n2')).to.not.equal(n2);
    // The same text again is no change at all.
    write({ peers: [entry('n4', 4), entry('n2', 2, { mtu: 9000 }), entry('n3', 3)] });
    await s.reload();
    expect(changes).to.equal(before + 1);
  });

  it('reads the file again on the poll when no event comes', async () => {
    write({ peers: [entry('n2', 2)] });
    const s = await started(file, 50);
    // Written in place, with the watch closed: only the poll can see it.
    (s as unknown as { watcher?: fs.FSWatcher }).watcher?.close();
    fs.writeFileSync(file, JSON.stringify({ peers: [] }));
    await until(() => s.peers().size === 0, 10_000, 'the new table (poll)');
  });

  it('refuses a bad file whole, names the field and keeps the table read before', async () => {
    write({ peers: [entry('n2', 2), entry('n3', 3)] });
    const s = await started();
    write({ peers: [entry('n2', 2), entry('n3', 3, { prefixes: ['10.244.3.1/24'] })] });
    await until(() => s.status().reasons.length > 0, 10_000, 'the refusal');
    expect(s.status().reasons[0]).to.include(`peers file ${file}: peers[1].prefixes[0]`);
    expect(s.status().reasons[0]).to.include('the table read before is kept');
    expect(s.synced).to.equal(true);
    expect([...s.peers().keys()]).to.deep.equal(['n2', 'n3']);
    // Fixed: taken, and the reason goes.
    write({ peers: [entry('n2', 2)] });
    await until(() => s.peers().size === 1 && s.status().reasons.length === 0, 10_000, 'the fixed file');
  });

  it('is not synced while the file is missing or bad at start (nothing may be removed on its word)', async () => {
    const s = await started();
    expect(s.synced).to.equal(false);
    expect(s.status().reasons).to.deep.equal([`peers file ${file} does not exist`]);
    write('{"peers": [');
    await until(() => s.status().reasons[0]?.includes('not valid JSON') ?? false, 10_000, 'the refusal');
    expect(s.synced).to.equal(false);
    write({ peers: [entry('n2', 2)] });
    await until(() => s.synced, 10_000, 'the first good file');
    expect(s.peers().size).to.equal(1);
  });
});

describe('static peer source: DPU endpoints', () => {
  let dir: string;
  let source: StaticPeerSource | undefined;
  afterEach(async () => {
    await source?.stop();
    source = undefined;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("delivers an entry's endpoints, drops and reports a prefix outside the entry's own, and update() publishes nothing", async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-peers-'));
    const file = path.join(dir, 'peers.json');
    const dpu = tunnelEndpoint;
    const text = JSON.stringify({
      peers: [
        entry('n1', 1, { endpoints: [dpu('self-dpu', 40, ['10.99.0.0/24'])] }),
        entry('n2', 2, {
          vtep: undefined,
          endpoints: [
            dpu('dpu-0', 20, ['10.244.2.0/26', '10.244.2.77/32']),
            dpu('dpu-1', 21, ['10.244.2.64/26', '10.244.3.0/26']),
          ],
        }),
      ],
    });
    fs.writeFileSync(file, text);
    source = new StaticPeerSource(file, silentLogger(), { pollMs: 60_000 });
    await source.start(SELF);
    expect(source.peers().get('n2')?.endpoints).to.deep.equal([
      dpu('dpu-0', 20, ['10.244.2.0/26', '10.244.2.77/32']),
      dpu('dpu-1', 21, ['10.244.2.64/26']),
    ]);
    // Its own entry is skipped, and so is what that entry's endpoints claim.
    expect(source.status().rejected).to.deep.equal([
      `peers file ${file}: peers[1]: node n2: endpoint dpu-1 claims 10.244.3.0/26, which is not inside its entry's prefixes (10.244.2.0/24); prefix ignored`,
    ]);
    await source.update({ ...SELF, endpoints: [] });
    expect(fs.readFileSync(file, 'utf8')).to.equal(text);
  });
});

describe('peers file', () => {
  const parse = (doc: unknown): unknown => parsePeersFile(JSON.stringify(doc), '/etc/p.json');

  it('takes the defaults for mtu, vni, port and boot id, and canonical addresses', () => {
    const peers = parsePeersFile(
      JSON.stringify({
        peers: [
          {
            node: 'n2',
            underlay: ['FD00::0002'],
            vtep: { mac: '0E:77:00:00:00:02' },
            prefixes: ['fd00:244::/64'],
          },
        ],
      }),
      '/etc/p.json',
    );
    expect(peers.get('n2')).to.deep.equal({
      node: 'n2',
      underlay: ['fd00::2'],
      mtu: 1500,
      vtep: { mac: '0e:77:00:00:00:02', vni: 30574, port: 4789 },
      prefixes: ['fd00:244::/64'],
      bootId: '',
    });
  });

  for (const [what, doc, message] of [
    ['no peers list', { nodes: [] }, 'must hold a JSON object with a "peers" list'],
    ['an unknown key', { peers: [{ ...entry('n2', 2), vni: 1 }] }, 'peers[0]: unknown key "vni"'],
    ['a bad node name', { peers: [entry('N_2', 2)] }, 'peers[0].node must be a node name'],
    [
      'no underlay',
      { peers: [entry('n2', 2, { underlay: [] })] },
      'peers[0].underlay must be a non-empty list',
    ],
    ['a bad underlay', { peers: [entry('n2', 2, { underlay: ['10.0.0.300'] })] }, 'peers[0].underlay[0]'],
    ['a bad MAC', { peers: [entry('n2', 2, { vtep: { mac: 'zz' } })] }, 'peers[0].vtep.mac'],
    [
      'a bad VNI',
      { peers: [entry('n2', 2, { vtep: { mac: '0e:77:00:00:00:02', vni: 0 } })] },
      'peers[0].vtep.vni',
    ],
    ['a node twice', { peers: [entry('n2', 2), entry('n2', 3)] }, 'peers[1].node: "n2" is listed twice'],
  ] as const) {
    it(`refuses ${what}, naming the field`, () => {
      expect(() => parse(doc)).to.throw(message);
    });
  }

  const bytes = (doc: unknown): Buffer => Buffer.from(JSON.stringify(doc));

  it('names a dropped endpoint prefix of an entry read before at its new place in the list', () => {
    const withEndpoint = entry('n2', 2, {
      prefixes: ['10.244.2.0/24'],
      endpoints: [
        {
          id: 'd0',
          underlay: '192.0.2.50',
          mtu: 1500,
          vtep: { mac: '0e:77:c0:00:02:32', vni: 30574, port: 4789 },
          prefixes: ['10.244.2.0/25', '10.9.0.0/24'],
        },
      ],
    });
    const reader = new PeersFileReader();
    const first = reader.read(bytes({ peers: [withEndpoint] }), '/etc/p.json');
    expect(first.rejected.map((r) => r.why).join('\n')).to.contain('peers[0]');
    const again = reader.read(bytes({ peers: [entry('n3', 3), withEndpoint] }), '/etc/p.json');
    expect(again.peers.get('n2')).to.equal(first.peers.get('n2'));
    expect(again.rejected).to.have.length(1);
    expect(again.rejected[0]?.why).to.contain('peers[1]').and.contain('10.9.0.0/24');
  });

  it('reads a file of another layout (white space, key order) as the same peers, and an entry that is not JSON as the whole file is named', () => {
    const reader = new PeersFileReader();
    const pretty = Buffer.from(JSON.stringify({ peers: [entry('n2', 2), entry('n3', 3)] }, null, 2));
    const a = reader.read(pretty, '/etc/p.json');
    const b = new PeersFileReader().read(bytes({ peers: [entry('n2', 2), entry('n3', 3)] }), '/etc/p.json');
    expect([...a.peers.values()]).to.deep.equal([...b.peers.values()]);
    // Read again as it is: the same records.
    const again = reader.read(pretty, '/etc/p.json');
    expect(again.peers.get('n3')).to.equal(a.peers.get('n3'));
    // A broken entry: the file's own parse names where.
    const broken = Buffer.from('{"peers":[' + JSON.stringify(entry('n2', 2)) + ',{"node":"n3",}]}');
    expect(() => reader.read(broken, '/etc/p.json')).to.throw('not valid JSON');
    // Text after the list, another key: refused whole, named.
    expect(() => reader.read(Buffer.from('{"peers":[],"nodes":[]}'), '/etc/p.json')).to.throw(
      'unknown key "nodes"',
    );
    expect(() => reader.read(Buffer.from('{"peers":[]} x'), '/etc/p.json')).to.throw('not valid JSON');
  });

  it('reads endpoints, canonical, and an entry without them as before', () => {
    const { peers, rejected } = readPeersFile(
      JSON.stringify({
        peers: [
          entry('n2', 2, {
            endpoints: [
              {
                id: 'dpu-0',
                underlay: '192.0.2.20',
                mtu: 1500,
                vtep: { mac: '0E:77:C0:00:02:14', vni: 30574, port: 4789 },
                prefixes: ['10.244.2.0/25'],
              },
            ],
          }),
          entry('n3', 3),
        ],
      }),
      '/etc/p.json',
    );
    expect(rejected).to.deep.equal([]);
    expect(peers.get('n2')?.endpoints).to.deep.equal([
      {
        id: 'dpu-0',
        underlay: '192.0.2.20',
        mtu: 1500,
        vtep: { mac: '0e:77:c0:00:02:14', vni: 30574, port: 4789 },
        prefixes: ['10.244.2.0/25'],
      },
    ]);
    expect(peers.get('n3')).to.not.have.property('endpoints');
  });

  const ep = {
    id: 'd',
    underlay: '192.0.2.9',
    mtu: 1500,
    vtep: { mac: '0e:77:c0:00:02:09', vni: 30574, port: 4789 },
    prefixes: [],
  };
  for (const [what, endpoints, message] of [
    ['endpoints not a list', { id: 'd' }, 'peers[0].endpoints must be a list'],
    [
      'an endpoint without an id',
      [{ ...ep, id: '' }],
      'peers[0].endpoints[0].id must be 1-253 printable characters',
    ],
    ['an endpoint id twice', [ep, ep], 'peers[0].endpoints[1].id "d" is listed twice'],
    ['an unknown endpoint key', [{ ...ep, vni: 1 }], 'peers[0].endpoints[0]: unknown key "vni"'],
    [
      'a bad endpoint underlay',
      [{ ...ep, underlay: ['192.0.2.9'] }],
      'peers[0].endpoints[0].underlay must be one IP address',
    ],
    [
      'a bad endpoint MTU',
      [{ ...ep, mtu: 100 }],
      'peers[0].endpoints[0].mtu must be an integer in 576..65535',
    ],
    [
      'an endpoint without a VTEP',
      [{ ...ep, vtep: undefined }],
      'peers[0].endpoints[0].vtep must be an object',
    ],
    ['a bad endpoint VNI', [{ ...ep, vtep: { ...ep.vtep, vni: 0 } }], 'peers[0].endpoints[0].vtep.vni'],
    [
      'a bad endpoint prefix',
      [{ ...ep, prefixes: ['10.244.2.1/24'] }],
      'peers[0].endpoints[0].prefixes[0]: 10.244.2.1/24 has host bits set',
    ],
  ] as const) {
    it(`refuses ${what} whole, naming the field`, () => {
      expect(() => parse({ peers: [entry('n2', 2, { endpoints })] })).to.throw(
        `peers file /etc/p.json: ${message}`,
      );
    });
  }
});
