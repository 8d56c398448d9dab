import { expect } from 'chai';
import {
  AF_BRIDGE,
  AF_INET,
  AF_INET6,
  NTF_SELF,
  NUD_PERMANENT,
  RTM_NEWLINK,
  RTM_NEWNEIGH,
  RTM_NEWROUTE,
  RTN_UNREACHABLE,
  RTNH_F_ONLINK,
  RTPROT_WORKLOADNET,
  RT_SCOPE_UNIVERSE,
  attributeMap,
  decodeLink,
  decodeNeighbour,
  decodeRoute,
  delNeighbourRequest,
  dumpNeighboursRequest,
  newLinkRequest,
  newNeighbourRequest,
  newRouteRequest,
  vxlanInfoData,
} from '../../../lib/rtnetlink';
import {
  IFLA_VXLAN_LEARNING,
  IFLA_VXLAN_LOCAL,
  IFLA_VXLAN_LOCAL6,
  IFLA_VXLAN_PORT,
} from '../../../lib/rtnetlink/vxlan';
import { NDA_DST, NDA_IFINDEX, NDA_LLADDR } from '../../../lib/rtnetlink/neighbour';
import { NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE } from '../../../lib/rtnetlink/message';
import { vtepMac } from '../../../lib/vtep-mac';

// The fabric's part of the codec, checked against the wire layout the kernel uses (struct ndmsg,
// IFLA_VXLAN_* with its one big-endian attribute, RTA_METRICS), without a kernel.

const msg = (type: number, payload: Buffer) => ({ type, flags: 0, seq: 0, pid: 0, payload });

describe('rtnetlink: the fabric objects (codec)', () => {
  it('builds a VXLAN link with the port in network byte order and learning off, and reads it back', () => {
    const data = vxlanInfoData({ vni: 30574, port: 4789, local: '10.0.0.1', link: 3, learning: false });
    const req = newLinkRequest({
      name: 'wn-vxlan',
      kind: 'vxlan',
      mtu: 1450,
      mac: '0e:77:0a:00:00:01',
      infoData: data,
    });
    expect(req.flags).to.equal(NLM_F_CREATE | NLM_F_EXCL);
    const link = decodeLink(msg(RTM_NEWLINK, req.payload));
    expect(link).to.include({ name: 'wn-vxlan', kind: 'vxlan', mtu: 1450, mac: '0e:77:0a:00:00:01' });
    expect(link.vxlan).to.deep.equal({ vni: 30574, port: 4789, local: '10.0.0.1', link: 3, learning: false });
    // 4789 = 0x12b5: the bytes go into the UDP header as they are.
    const port = req.payload.indexOf(Buffer.from([6, 0, IFLA_VXLAN_PORT, 0, 0x12, 0xb5]));
    expect(port).to.be.greaterThan(0);
    expect(req.payload.indexOf(Buffer.from([5, 0, IFLA_VXLAN_LEARNING, 0, 0]))).to.be.greaterThan(0);
    expect(req.payload.indexOf(Buffer.from([8, 0, IFLA_VXLAN_LOCAL, 0, 10, 0, 0, 1]))).to.be.greaterThan(0);
  });

  it('puts an IPv6 local address in IFLA_VXLAN_LOCAL6 and refuses a VNI or port out of range', () => {
    const data = vxlanInfoData({ vni: 1, port: 8472, local: 'fd00::1', learning: true });
    expect(data.map((a) => a.type)).to.include(IFLA_VXLAN_LOCAL6);
    const link = decodeLink(
      msg(RTM_NEWLINK, newLinkRequest({ name: 'v', kind: 'vxlan', infoData: data }).payload),
    );
    expect(link.vxlan).to.deep.equal({ vni: 1, port: 8472, local: 'fd00::1', learning: true });
    expect(() => vxlanInfoData({ vni: 1 << 24, port: 4789, learning: false })).to.throw(
      /VNI must be in 0\.\.16777215/,
    );
    expect(() => vxlanInfoData({ vni: 1, port: 0, learning: false })).to.throw(/port must be in 1\.\.65535/);
  });

  it('builds a permanent neighbour and a self FDB entry as struct ndmsg plus NDA_DST and NDA_LLADDR', () => {
    const n = newNeighbourRequest(
      { family: AF_INET, ifindex: 7, dst: '10.244.2.0', mac: '0e:77:0a:00:00:02' },
      { replace: true },
    );
    expect(n.type).to.equal(RTM_NEWNEIGH);
    expect(n.flags).to.equal(NLM_F_CREATE | NLM_F_REPLACE);
    // family, pad, pad(2), ifindex(4), state(2), flags, type
    expect([...n.payload.subarray(0, 12)]).to.deep.equal([
      AF_INET,
      0,
      0,
      0,
      7,
      0,
      0,
      0,
      NUD_PERMANENT,
      0,
      0,
      0,
    ]);
    expect(decodeNeighbour(msg(RTM_NEWNEIGH, n.payload))).to.deep.equal({
      family: AF_INET,
      ifindex: 7,
      state: NUD_PERMANENT,
      flags: 0,
      dst: '10.244.2.0',
      mac: '0e:77:0a:00:00:02',
    });
    const fdb = newNeighbourRequest(
      { family: AF_BRIDGE, ifindex: 7, mac: '0e:77:0a:00:00:02', dst: '192.0.2.2', flags: NTF_SELF },
      { replace: true },
    );
    expect(decodeNeighbour(msg(RTM_NEWNEIGH, fdb.payload))).to.deep.equal({
      family: AF_BRIDGE,
      ifindex: 7,
      state: NUD_PERMANENT,
      flags: NTF_SELF,
      dst: '192.0.2.2',
      mac: '0e:77:0a:00:00:02',
    });
    const attrs = attributeMap(fdb.payload.subarray(12));
    expect([...(attrs.get(NDA_DST) ?? [])]).to.deep.equal([192, 0, 2, 2]);
    expect(attrs.get(NDA_LLADDR)?.length).to.equal(6);
    const del = delNeighbourRequest({ family: AF_INET6, ifindex: 7, dst: 'fd00:2::' });
    expect(decodeNeighbour(msg(RTM_NEWNEIGH, del.payload))).to.include({ family: AF_INET6, dst: 'fd00:2::' });
    // A neighbour dump narrowed to one device in the kernel; an FDB dump takes a bare ndmsg.
    expect(attributeMap(dumpNeighboursRequest(AF_INET, 7).payload.subarray(12)).has(NDA_IFINDEX)).to.equal(
      true,
    );
    expect(dumpNeighboursRequest(AF_BRIDGE, 7).payload.length).to.equal(12);
  });

  it('round-trips a route with our protocol, an on-link gateway, a metric and an MTU', () => {
    const r = newRouteRequest({
      destination: '10.244.2.0/24',
      gateway: '10.244.2.0',
      oif: 7,
      onlink: true,
      protocol: RTPROT_WORKLOADNET,
      priority: 1024,
      mtu: 1450,
    });
    expect(decodeRoute(msg(RTM_NEWROUTE, r.payload))).to.include({
      destination: '10.244.2.0/24',
      gateway: '10.244.2.0',
      oif: 7,
      protocol: 0x77,
      priority: 1024,
      mtu: 1450,
      flags: RTNH_F_ONLINK,
    });
  });

  it('builds an unreachable route of universe scope with no next hop', () => {
    const r = newRouteRequest({
      destination: '10.244.0.0/16',
      type: RTN_UNREACHABLE,
      protocol: RTPROT_WORKLOADNET,
      priority: 4294967295,
    });
    const route = decodeRoute(msg(RTM_NEWROUTE, r.payload));
    expect(route).to.include({ type: RTN_UNREACHABLE, scope: RT_SCOPE_UNIVERSE, priority: 4294967295 });
    expect(route.gateway).to.equal(undefined);
    expect(route.oif).to.equal(undefined);
  });

  it('derives the VTEP MAC from the node address: 0e:77 then the IPv4 bytes, or 4 bytes of a hash for IPv6', () => {
    expect(vtepMac('10.100.1.2')).to.equal('0e:77:0a:64:01:02');
    const v6 = vtepMac('fd00::2');
    expect(v6).to.match(/^0e:77(:[0-9a-f]{2}){4}$/);
    expect(vtepMac('fd00::2')).to.equal(v6);
    expect(vtepMac('fd00::3')).to.not.equal(v6);
  });

  it('gives two named nodes with one address (on different underlays) different MACs, each the same every time', () => {
    const a = vtepMac('10.100.1.2', 'n2');
    expect(a).to.match(/^0e(:[0-9a-f]{2}){5}$/);
    expect(vtepMac('10.100.1.2', 'n2'), 'the same after a reboot').to.equal(a);
    expect(vtepMac('10.100.1.2', 'n3')).to.not.equal(a);
    expect(vtepMac('10.100.1.3', 'n2')).to.not.equal(a);
    expect(vtepMac('fd00:0::2', 'n2'), 'one address, however written').to.equal(vtepMac('fd00::2', 'n2'));
  });
});
