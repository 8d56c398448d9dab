import { expect } from 'chai';
import * as fc from 'fast-check';
import {
  AF_INET,
  AF_INET6,
  IFA_F_NODAD,
  IFA_F_NOPREFIXROUTE,
  IPV4_DEVCONF_PROXY_ARP,
  NLA_F_NESTED,
  NLM_F_ACK,
  NLM_F_CREATE,
  NLM_F_DUMP,
  NLM_F_ECHO,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  NLMSG_DONE,
  NLMSG_ERROR,
  RTM_NEWADDR,
  RTM_NEWLINK,
  RTM_NEWROUTE,
  RTM_SETLINK,
  RTNH_F_ONLINK,
  RT_SCOPE_LINK,
  attrNest,
  attrString,
  attrU16,
  attrU32,
  attrU8,
  attributeMap,
  canonicalAddress,
  addressBytes,
  decodeAddress,
  decodeAttributes,
  decodeDoneMessage,
  decodeErrorMessage,
  decodeLink,
  decodeMessages,
  decodeRoute,
  delLinkRequest,
  encodeAttributes,
  encodeMessage,
  encodeMessages,
  errnoName,
  formatAddress,
  getString,
  getU32,
  newAddressRequest,
  newRouteRequest,
  newVethRequest,
  NetlinkError,
  setLinkRequest,
  type NetlinkMessage,
} from '../../../lib/rtnetlink';
import { isDump } from '../../../lib/rtnetlink/socket';
import { IFLA_AF_SPEC, IFLA_INFO_DATA, IFLA_LINKINFO } from '../../../lib/rtnetlink/link';
import { VETH_INFO_PEER } from '../../../lib/rtnetlink/veth';

// Builds what the kernel would send, byte by byte, so that decoding is tested against the wire
// layout rather than against our own encoder.
function kernelError(opts: {
  errno: number;
  request: NetlinkMessage;
  capped: boolean;
  extackMessage?: string;
  offset?: number;
}): NetlinkMessage {
  const orig = encodeMessage(opts.request);
  const origLen = orig.readUInt32LE(0);
  const head = Buffer.alloc(4);
  head.writeInt32LE(-opts.errno, 0);
  const body = opts.capped ? orig.subarray(0, 16) : orig;
  const tlvs = [];
  if (opts.extackMessage !== undefined) tlvs.push(attrString(1, opts.extackMessage));
  if (opts.offset !== undefined) tlvs.push(attrU32(2, opts.offset));
  const payload = Buffer.concat([head, body, encodeAttributes(tlvs)]);
  expect(origLen).to.be.greaterThan(16);
  return {
    type: NLMSG_ERROR,
    flags: (opts.capped ? 0x100 : 0) | (tlvs.length > 0 ? 0x200 : 0),
    seq: opts.request.seq,
    pid: 0,
    payload,
  };
}

describe('rtnetlink codec', () => {
  describe('attributes', () => {
    it('pads every attribute to 4 bytes while the length field counts only header and payload', () => {
      const buf = encodeAttributes([attrU8(1, 7), attrString(2, 'ab'), attrU16(3, 0x1234)]);
      // u8: 4+1 → 8, "ab\0": 4+3 → 8, u16: 4+2 → 8
      expect(buf.length).to.equal(24);
      expect(buf.readUInt16LE(0)).to.equal(5);
      expect(buf.readUInt16LE(8)).to.equal(7);
      expect(buf.readUInt16LE(16)).to.equal(6);
      expect(buf.subarray(5, 8).equals(Buffer.alloc(3))).to.equal(true, 'padding is zeroed');
    });

    it('marks nests with NLA_F_NESTED and strips the flag when decoding', () => {
      const buf = encodeAttributes([attrNest(26, [attrNest(2, [attrU32(3, 1)])])]);
      expect(buf.readUInt16LE(2)).to.equal(26 | NLA_F_NESTED);
      const [outer] = decodeAttributes(buf);
      expect(outer?.type).to.equal(26);
      expect(outer?.nested).to.equal(true);
      const [inner] = decodeAttributes(outer!.value);
      const [leaf] = decodeAttributes(inner!.value);
      expect(leaf && getU32(leaf.value)).to.equal(1);
    });

    it('round-trips arbitrary attribute lists', () => {
      fc.assert(
        fc.property(
          fc.array(
            fc.record({ type: fc.integer({ min: 1, max: 0x3fff }), value: fc.uint8Array({ maxLength: 40 }) }),
            {
              maxLength: 12,
            },
          ),
          (attrs) => {
            const buf = encodeAttributes(attrs.map((a) => ({ type: a.type, value: Buffer.from(a.value) })));
            expect(buf.length % 4).to.equal(0);
            const back = decodeAttributes(buf);
            expect(back.map((a) => a.type)).to.deep.equal(attrs.map((a) => a.type));
            back.forEach((a, i) => expect([...a.value]).to.deep.equal([...attrs[i]!.value]));
          },
        ),
      );
    });

    it('rejects an attribute whose length runs past the buffer', () => {
      const buf = encodeAttributes([attrU32(1, 5)]);
      buf.writeUInt16LE(40, 0);
      expect(() => decodeAttributes(buf)).to.throw(RangeError, /malformed netlink attribute/);
    });

    it('reads strings with or without their NUL terminator', () => {
      expect(getString(Buffer.from('eth0\0'))).to.equal('eth0');
      expect(getString(Buffer.from('eth0'))).to.equal('eth0');
    });
  });

  describe('messages', () => {
    it('frames several messages in one datagram and splits them back', () => {
      const msgs: NetlinkMessage[] = [
        { type: 16, flags: 5, seq: 1, pid: 0, payload: Buffer.from([1, 2, 3]) },
        { type: 17, flags: 5, seq: 2, pid: 0, payload: Buffer.alloc(16, 9) },
      ];
      const buf = encodeMessages(msgs);
      expect(buf.length).to.equal(20 + 32, 'the first message is padded from 19 to 20 bytes');
      const back = decodeMessages(buf);
      expect(back.map((m) => [m.type, m.seq, m.payload.length])).to.deep.equal([
        [16, 1, 3],
        [17, 2, 16],
      ]);
    });

    it('reports a truncated datagram instead of dropping the message silently', () => {
      const buf = encodeMessage({ type: 16, flags: 0, seq: 1, pid: 0, payload: Buffer.alloc(40) });
      expect(() => decodeMessages(buf.subarray(0, 30))).to.throw(RangeError, /malformed netlink message/);
    });

    it('treats NLM_F_DUMP as a dump only on GET requests, since it shares bits with REPLACE|EXCL', () => {
      expect(isDump({ type: 18, flags: NLM_F_DUMP, payload: Buffer.alloc(0) })).to.equal(true);
      expect(
        isDump({ type: RTM_NEWROUTE, flags: NLM_F_CREATE | NLM_F_REPLACE, payload: Buffer.alloc(0) }),
      ).to.equal(false);
      expect(
        isDump({ type: RTM_NEWADDR, flags: NLM_F_CREATE | NLM_F_EXCL, payload: Buffer.alloc(0) }),
      ).to.equal(false);
    });
  });

  describe('errors', () => {
    const request: NetlinkMessage = {
      type: RTM_NEWADDR,
      flags: NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
      seq: 42,
      pid: 0,
      payload: newAddressRequest({ index: 3, address: '10.0.0.1', prefixLength: 32 }).payload,
    };

    it('decodes a capped error with the kernel extended-ack message and offset', () => {
      const msg = kernelError({
        errno: 17,
        request,
        capped: true,
        extackMessage: 'ipv4: Address already assigned',
        offset: 24,
      });
      const ack = decodeErrorMessage(msg);
      expect(ack).to.deep.equal({
        errno: 17,
        requestType: RTM_NEWADDR,
        extack: { message: 'ipv4: Address already assigned', offset: 24 },
      });
      const err = new NetlinkError(ack.errno, ack.requestType, ack.extack);
      expect(err.code).to.equal('EEXIST');
      expect(err.errno).to.equal(17);
      expect(err.message).to.match(/^RTM_NEWADDR failed: EEXIST .*: ipv4: Address already assigned$/);
    });

    it('finds the extended ack after an uncapped copy of the request', () => {
      const msg = kernelError({ errno: 19, request, capped: false, extackMessage: 'Device not found' });
      expect(decodeErrorMessage(msg)).to.deep.include({ errno: 19, extack: { message: 'Device not found' } });
    });

    it('reads error 0 as an ACK', () => {
      const msg = kernelError({ errno: 0, request, capped: true });
      expect(decodeErrorMessage(msg).errno).to.equal(0);
    });

    it('decodes a failed dump from NLMSG_DONE', () => {
      const payload = Buffer.concat([
        Buffer.from([0xea, 0xff, 0xff, 0xff]),
        encodeAttributes([attrString(1, 'bad filter')]),
      ]);
      const done = decodeDoneMessage({ type: NLMSG_DONE, flags: 0x200 | 2, seq: 1, pid: 0, payload });
      expect(done).to.deep.equal({ errno: 22, requestType: 0, extack: { message: 'bad filter' } });
    });

    it('names errnos the way the kernel headers do', () => {
      expect(errnoName(17)).to.equal('EEXIST');
      expect(errnoName(19)).to.equal('ENODEV');
      expect(errnoName(95)).to.equal('EOPNOTSUPP');
      expect(errnoName(100000)).to.equal('E100000');
    });
  });

  describe('addresses', () => {
    it('formats IPv6 canonically (RFC 5952): lowercase, longest zero run compressed, first on a tie', () => {
      expect(canonicalAddress('FD00:0:0:0:0:0:0:1')).to.equal('fd00::1');
      expect(canonicalAddress('2001:db8:0:0:1:0:0:1')).to.equal('2001:db8::1:0:0:1');
      expect(canonicalAddress('2001:db8:0:1:1:1:1:1')).to.equal('2001:db8:0:1:1:1:1:1');
      expect(canonicalAddress('::')).to.equal('::');
      // IPv4-mapped addresses keep the dotted quad (RFC 5952 §5).
      expect(canonicalAddress('::FFFF:a01:203')).to.equal('::ffff:10.1.2.3');
      expect(canonicalAddress('fe80::1')).to.equal('fe80::1');
    });

    it('round-trips any 4 or 16 bytes through text', () => {
      fc.assert(
        fc.property(
          fc.oneof(
            fc.uint8Array({ minLength: 4, maxLength: 4 }),
            fc.uint8Array({ minLength: 16, maxLength: 16 }),
          ),
          (raw) => {
            const bytes = Buffer.from(raw);
            expect(addressBytes(formatAddress(bytes)).equals(bytes)).to.equal(true);
          },
        ),
      );
    });
  });

  describe('requests and answers', () => {
    it('builds a veth create whose peer carries its own ifinfomsg, name, MTU, MAC and namespace fd', () => {
      const req = newVethRequest(
        {
          name: 'wn0123',
          mtu: 1400,
          group: 0x776e,
          up: true,
          peer: { name: 'eth0', mtu: 1400, mac: '02:00:00:00:00:01', netnsFd: 33 },
        },
        { echo: true },
      );
      expect(req.type).to.equal(RTM_NEWLINK);
      expect(req.flags).to.equal(NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO);
      const host = decodeLink({ type: RTM_NEWLINK, flags: 0, seq: 0, pid: 0, payload: req.payload });
      expect(host).to.include({ name: 'wn0123', mtu: 1400, group: 0x776e, up: true, kind: 'veth' });
      const attrs = attributeMap(req.payload.subarray(16));
      const data = attributeMap(attributeMap(attrs.get(IFLA_LINKINFO)!).get(IFLA_INFO_DATA)!);
      const peerRaw = data.get(VETH_INFO_PEER)!;
      const peer = decodeLink({ type: RTM_NEWLINK, flags: 0, seq: 0, pid: 0, payload: peerRaw });
      expect(peer).to.include({ name: 'eth0', mtu: 1400, mac: '02:00:00:00:00:01', up: false });
      expect(getU32(attributeMap(peerRaw.subarray(16)).get(28)!)).to.equal(33, 'IFLA_NET_NS_FD');
    });

    it('sends per-interface IPv4 settings as one attribute per IPV4_DEVCONF id inside IFLA_AF_SPEC', () => {
      const req = setLinkRequest(
        { index: 7 },
        { alias: 'workloadnet:a/eth0', inetConf: { [IPV4_DEVCONF_PROXY_ARP]: 1 } },
      );
      expect(req.type).to.equal(RTM_SETLINK);
      expect(req.payload.readInt32LE(4)).to.equal(7);
      const af = attributeMap(req.payload.subarray(16)).get(IFLA_AF_SPEC)!;
      const inet = attributeMap(attributeMap(af).get(AF_INET)!);
      const conf = decodeAttributes(inet.get(1)!);
      expect(conf.map((c) => [c.type, getU32(c.value)])).to.deep.equal([[IPV4_DEVCONF_PROXY_ARP, 1]]);
    });

    it('selects a link by name only when no index is given', () => {
      const byName = attributeMap(delLinkRequest({ name: 'wnabc' }).payload.subarray(16));
      expect(getString(byName.get(3)!)).to.equal('wnabc');
      const byIndex = delLinkRequest({ index: 9 });
      expect(byIndex.payload.readInt32LE(4)).to.equal(9);
      expect(attributeMap(byIndex.payload.subarray(16)).size).to.equal(0);
    });

    it('round-trips an IPv6 address with flags above the 8-bit header field', () => {
      const req = newAddressRequest({
        index: 4,
        address: 'fd00::2',
        prefixLength: 128,
        flags: IFA_F_NODAD | IFA_F_NOPREFIXROUTE,
      });
      const a = decodeAddress({ type: RTM_NEWADDR, flags: 0, seq: 0, pid: 0, payload: req.payload });
      expect(a).to.include({
        family: AF_INET6,
        index: 4,
        address: 'fd00::2',
        prefixLength: 128,
        flags: IFA_F_NODAD | IFA_F_NOPREFIXROUTE,
      });
    });

    it('round-trips a default route via an on-link gateway and a scope-link host route', () => {
      const def = newRouteRequest({ destination: 'default', gateway: '169.254.1.1', oif: 2, onlink: true });
      const r = decodeRoute({ type: RTM_NEWROUTE, flags: 0, seq: 0, pid: 0, payload: def.payload });
      expect(r).to.include({
        family: AF_INET,
        destination: '0.0.0.0/0',
        gateway: '169.254.1.1',
        oif: 2,
        table: 254,
      });
      expect(r.flags & RTNH_F_ONLINK).to.equal(RTNH_F_ONLINK);
      const host = newRouteRequest({ destination: '10.1.2.3/32', oif: 5 }, { replace: true });
      expect(host.flags).to.equal(NLM_F_CREATE | NLM_F_REPLACE);
      expect(decodeRoute({ type: RTM_NEWROUTE, flags: 0, seq: 0, pid: 0, payload: host.payload })).to.include(
        {
          destination: '10.1.2.3/32',
          scope: RT_SCOPE_LINK,
          oif: 5,
        },
      );
      const v6 = newRouteRequest({ destination: 'default', gateway: 'fe80::1', oif: 2 });
      expect(decodeRoute({ type: RTM_NEWROUTE, flags: 0, seq: 0, pid: 0, payload: v6.payload })).to.include({
        family: AF_INET6,
        destination: '::/0',
        gateway: 'fe80::1',
      });
    });

    it('refuses a gateway of the other family', () => {
      expect(() => newRouteRequest({ destination: '10.0.0.0/8', gateway: 'fe80::1' })).to.throw(
        TypeError,
        /family/,
      );
    });
  });
});
