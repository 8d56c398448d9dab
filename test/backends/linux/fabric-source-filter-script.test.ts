import { expect } from 'chai';
import type { Peer } from '../../../core/peer-source';
import {
  filterScript,
  parseCounter,
  peerAddresses,
  removeScript,
} from '../../../backends/linux/fabric/vxlan-filter-script';
import { innerSources, rawRange } from '../../../backends/linux/fabric/vxlan-inner-sources';
import { parseCidr } from '../../../lib/cidr';

// What the VXLAN source filter asks nft for, as text: who is admitted, and that one transaction both
// keeps the table and replaces the sets. The kernel's side is in fabric-source-filter.test.ts.

const peer = (node: string, underlay: string[], endpoints: string[] = [], prefixes: string[] = []): Peer => ({
  node,
  underlay,
  mtu: 1500,
  bootId: '',
  prefixes,
  endpoints: endpoints.map((u, i) => ({
    id: `dpu-${i}`,
    underlay: u,
    mtu: 1500,
    vtep: { mac: '0e:77:00:00:00:01', vni: 30574, port: 4789 },
    prefixes: [],
  })),
});

const lines = (s: string): string[] => s.split('\n').filter(Boolean);

describe('VXLAN source filter: the nft script', () => {
  it("admits every peer's underlay addresses of both families and its DPU endpoints, once each, canonical", () => {
    expect(
      peerAddresses([
        peer('n2', ['10.0.0.2', 'FD00:0:0::2']),
        peer('n3', ['10.0.0.3'], ['10.0.0.30', '10.0.0.2']),
        peer('bad', ['not-an-address']),
      ]),
    ).to.deep.equal({ v4: ['10.0.0.2', '10.0.0.3', '10.0.0.30'], v6: ['fd00::2'] });
  });

  it("lets a peer's underlay speak only as its own prefixes and addresses, and a DPU only as its slices inside them", () => {
    const n2 = peer('n2', ['10.0.0.2'], [], ['10.244.2.0/24', 'fd10:0:2::/64', '10.244.2.0/26', 'junk']);
    n2.endpoints = [
      {
        id: 'dpu',
        underlay: '10.0.0.20',
        mtu: 1500,
        vtep: { mac: '0e:77:00:00:00:02', vni: 30574, port: 4789 },
        prefixes: ['10.244.2.64/26', '10.244.9.0/26'],
      },
    ];
    const got = innerSources([n2, peer('n3', ['10.0.0.3'], ['10.0.0.33'])]);
    expect([...got].map(([o, cs]) => [o, cs.map((c) => c.text)])).to.deep.equal([
      ['10.0.0.2', ['10.0.0.2/32', '10.244.2.0/24', 'fd10:0:2::/64']],
      ['10.0.0.20', ['10.244.2.64/26']],
      ['10.0.0.3', ['10.0.0.3/32']],
    ]);
    expect(rawRange(parseCidr('10.244.3.0/24'))).to.equal('0x0af40300-0x0af403ff');
    expect(rawRange(parseCidr('fd10:0:3::/64'))).to.equal(
      '0xfd100000000300000000000000000000-0xfd10000000030000ffffffffffffffff',
    );
  });

  it('declares the table and every object with our mark, fills the sets and rewrites the rules in one script', () => {
    const s = filterScript({
      port: 4789,
      addresses: { v4: ['10.0.0.2'], v6: [] },
      inner: innerSources([peer('n2', ['10.0.0.2'], [], ['10.244.2.0/24'])]),
      vni: 30574,
    });
    const l = lines(s);
    expect(l[0]).to.equal('table inet workloadnet {');
    expect(l[1]).to.equal('  comment "workloadnet fabric";');
    expect(
      l
        .filter((x) => /^ {2}(set|counter|chain) /.test(x))
        .every((x) => x.includes('comment "workloadnet fabric";')),
    ).to.equal(true);
    expect(l).to.include('add element inet workloadnet vxlan_peers4 { 10.0.0.2 }');
    expect(l).to.include(
      'add element inet workloadnet vxlan_inner44 { 10.0.0.2 . 0x0a000002-0x0a000002, 10.0.0.2 . 0x0af40200-0x0af402ff }',
    );
    expect(l).to.include(
      'add rule inet workloadnet vxlan_input udp dport 4789 @ih,32,24 != 30574 counter name vxlan_filtered drop',
    );
    expect(l).to.include(
      'add rule inet workloadnet vxlan_input udp dport 4789 @ih,160,16 0x0800 ip saddr . @ih,272,32 != @vxlan_inner44 counter name vxlan_filtered drop',
    );
    // Outer packets to and from peers never enter conntrack, so no nat rule of anyone's sees them.
    expect(l).to.include(
      'add rule inet workloadnet vxlan_notrack_in udp dport 4789 ip saddr @vxlan_peers4 counter name vxlan_untracked notrack',
    );
    expect(l.filter((x) => x.startsWith('flush set '))).to.have.length(12);
    expect(s).to.not.match(/^(delete|flush) table/m);
    expect(s, 'without the direct path, its chain is left empty').to.not.match(
      /add rule inet workloadnet direct_input/,
    );
  });

  it('replaces the previous version’s table in the same transaction', () => {
    const s = filterScript(
      { port: 4789, addresses: { v4: [], v6: [] }, inner: new Map() },
      { replace: true },
    );
    expect(lines(s).slice(0, 2)).to.deep.equal(['delete table inet workloadnet', 'table inet workloadnet {']);
  });

  it('writes only the differences into sets whose present elements it knows', () => {
    const input = {
      port: 4789,
      addresses: { v4: ['10.0.0.2', '10.0.0.4'], v6: [] },
      inner: innerSources([peer('n2', ['10.0.0.2'], [], ['10.244.2.0/24'])]),
    };
    const previous = new Map([
      ['vxlan_peers4', new Set(['10.0.0.2', '10.0.0.3'])],
      ['vxlan_inner44', new Set(['10.0.0.2 . 0x0a000002-0x0a000002', '10.0.0.2 . 0x0af40200-0x0af402ff'])],
    ]);
    const l = lines(filterScript(input, { previous }));
    expect(l).to.include('delete element inet workloadnet vxlan_peers4 { 10.0.0.3 }');
    expect(l).to.include('add element inet workloadnet vxlan_peers4 { 10.0.0.4 }');
    expect(
      l.filter((x) => x.includes('vxlan_inner44') && !x.includes('rule') && !x.startsWith('  set')),
      'unchanged',
    ).to.deep.equal([]);
    expect(l, 'a set it does not know is written whole').to.include(
      'flush set inet workloadnet vxlan_peers6',
    );
    expect(l).to.not.include('flush set inet workloadnet vxlan_peers4');
  });

  it('removes only our objects, chains before the sets their rules use, and the table only when asked', () => {
    expect(
      removeScript({
        objects: [
          { kind: 'set', name: 'vxlan_peers4' },
          { kind: 'chain', name: 'vxlan_input' },
          { kind: 'counter', name: 'vxlan_filtered' },
        ],
        table: false,
      }),
    ).to.equal(
      'delete chain inet workloadnet vxlan_input\ndelete set inet workloadnet vxlan_peers4\n' +
        'delete counter inet workloadnet vxlan_filtered\n',
    );
    expect(removeScript({ objects: [], table: true })).to.equal('delete table inet workloadnet\n');
  });

  it("reads the counters from nft's listing, summed", () => {
    expect(
      parseCounter(
        'table inet workloadnet {\n\tcounter vxlan_filtered {\n\t\tpackets 42 bytes 4200\n\t}\n}\n' +
          'table inet workloadnet {\n\tcounter direct_filtered {\n\t\tpackets 3 bytes 300\n\t}\n}\n',
      ),
    ).to.equal(45);
    expect(parseCounter('')).to.equal(undefined);
  });
});
