import { expect } from 'chai';
import type { Peer } from '../../../core/fabric/peer-source';
import {
  REMOVE_SCRIPT,
  filterScript,
  parseCounter,
  peerAddresses,
} from '../../../backends/linux/fabric/vxlan-source-filter';

// What the VXLAN source filter asks nft for, as text: who is admitted, and that one transaction both
// keeps the table and replaces the sets. The kernel's side is in fabric-source-filter.test.ts.

const peer = (node: string, underlay: string[], endpoints: string[] = []): Peer => ({
  node,
  underlay,
  mtu: 1500,
  bootId: '',
  prefixes: [],
  endpoints: endpoints.map((u, i) => ({
    id: `dpu-${i}`,
    underlay: u,
    mtu: 1500,
    vtep: { mac: '0e:77:00:00:00:01', vni: 30574, port: 4789 },
    prefixes: [],
  })),
});

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

  it('declares the table (keeping it and its counters), flushes and refills both sets and the rules in one script', () => {
    const s = filterScript(4789, { v4: ['10.0.0.2'], v6: [] });
    expect(s.split('\n').filter(Boolean)).to.deep.equal([
      'table inet workloadnet {',
      '  set vxlan_peers4 { type ipv4_addr; }',
      '  set vxlan_peers6 { type ipv6_addr; }',
      '  counter vxlan_filtered { }',
      '  counter vxlan_untracked { }',
      '  chain vxlan_input { type filter hook input priority filter - 10; policy accept; }',
      '  chain vxlan_notrack_out { type filter hook output priority raw; policy accept; }',
      '  chain vxlan_notrack_in { type filter hook prerouting priority raw; policy accept; }',
      '}',
      'flush set inet workloadnet vxlan_peers4',
      'flush set inet workloadnet vxlan_peers6',
      'add element inet workloadnet vxlan_peers4 { 10.0.0.2 }',
      'flush chain inet workloadnet vxlan_input',
      'add rule inet workloadnet vxlan_input udp dport 4789 ip saddr != @vxlan_peers4 counter name vxlan_filtered drop',
      'add rule inet workloadnet vxlan_input udp dport 4789 ip6 saddr != @vxlan_peers6 counter name vxlan_filtered drop',
      // Outer packets to and from peers never enter conntrack, so no nat rule of anyone's sees them.
      'flush chain inet workloadnet vxlan_notrack_out',
      'add rule inet workloadnet vxlan_notrack_out udp dport 4789 ip daddr @vxlan_peers4 counter name vxlan_untracked notrack',
      'add rule inet workloadnet vxlan_notrack_out udp dport 4789 ip6 daddr @vxlan_peers6 counter name vxlan_untracked notrack',
      'flush chain inet workloadnet vxlan_notrack_in',
      'add rule inet workloadnet vxlan_notrack_in udp dport 4789 ip saddr @vxlan_peers4 counter name vxlan_untracked notrack',
      'add rule inet workloadnet vxlan_notrack_in udp dport 4789 ip6 saddr @vxlan_peers6 counter name vxlan_untracked notrack',
      'list counter inet workloadnet vxlan_filtered',
    ]);
    expect(s).to.not.match(/^(delete|flush) table/m);
  });

  it('removes only our table, without failing when it is not there', () => {
    expect(REMOVE_SCRIPT).to.equal('table inet workloadnet {}\ndelete table inet workloadnet\n');
  });

  it("reads the counter from nft's listing", () => {
    expect(
      parseCounter(
        'table inet workloadnet {\n\tcounter vxlan_filtered {\n\t\tpackets 42 bytes 4200\n\t}\n}\n',
      ),
    ).to.equal(42);
    expect(parseCounter('')).to.equal(undefined);
  });
});
