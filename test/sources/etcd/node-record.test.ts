import { expect } from 'chai';
import { decodeRecord, encodeRecord, MAX_RECORD_ENDPOINTS } from '../../../sources/etcd/node-record';
import type { NodeRecord } from '../../../core/peer-source';

// Node records are other nodes' words: everything that could not be programmed is refused as a whole,
// with what is wrong in the message.

const good: NodeRecord = {
  node: 'n2',
  underlay: ['192.0.2.2', '2001:db8::2'],
  mtu: 1500,
  vtep: { mac: '0e:77:c0:00:02:02', vni: 30574, port: 4789 },
  bootId: 'b',
};

const decode = (v: unknown, node = 'n2'): ReturnType<typeof decodeRecord> =>
  decodeRecord(node, typeof v === 'string' ? v : JSON.stringify(v));

describe('etcd node record', () => {
  it('round-trips a record, keeps only its fields, and reads announced prefixes apart', () => {
    expect(decode(JSON.parse(encodeRecord(good)))).to.deep.equal({ record: good, announced: [] });
    const extra = { ...good, extra: 1, prefixes: ['10.96.0.64/26'] };
    expect(JSON.parse(encodeRecord(extra as NodeRecord))).to.deep.equal(good);
    expect(decode(extra)).to.deep.equal({ record: good, announced: ['10.96.0.64/26'] });
    const { vtep: _vtep, ...routedOnly } = good;
    expect(decode(routedOnly).record).to.deep.equal(routedOnly);
  });

  it("carries its writer's stamp (store and boot) apart from the record, and reads an unstamped one as before", () => {
    const stamped = encodeRecord(good, { store: 's1', boot: 'b1' });
    expect(JSON.parse(stamped)).to.deep.equal({ ...good, holder: { store: 's1', boot: 'b1' } });
    expect(decodeRecord('n2', stamped)).to.deep.equal({
      record: good,
      announced: [],
      holder: { store: 's1', boot: 'b1' },
    });
    expect(decodeRecord('n2', encodeRecord(good))).to.not.have.property('holder');
  });

  it('round-trips the tunnel addresses (vtep.gateways), and an old record without them reads as it was', () => {
    const withTunnel: NodeRecord = {
      ...good,
      vtep: { ...good.vtep!, gateways: { 4: '10.96.0.66', 6: 'fd10::42' } },
    };
    expect(JSON.parse(encodeRecord(withTunnel))).to.deep.equal(withTunnel);
    expect(decode(JSON.parse(encodeRecord(withTunnel))).record).to.deep.equal(withTunnel);
    expect(decode(good).record.vtep).to.not.have.property('gateways');
  });

  it('refuses a record whose tunnel addresses are not one address of their family each', () => {
    const bad = (gateways: unknown): string => {
      try {
        decode({ ...good, vtep: { ...good.vtep, gateways } });
      } catch (err) {
        return (err as Error).message;
      }
      return 'accepted';
    };
    expect(bad(['10.96.0.66'])).to.match(/VTEP gateways .* not an object/);
    expect(bad({ 4: 'fd10::1' })).to.match(/gateway "fd10::1" for family 4, not an IPv4 address/);
    expect(bad({ 6: '10.96.0.66' })).to.match(/for family 6, not an IPv6 address/);
    expect(bad({ 4: '10.96.0.66/32' })).to.match(/not an IPv4 address/);
    expect(bad({ 4: 'x' })).to.match(/not an IPv4 address/);
    expect(bad({ 4: 7 })).to.match(/not an IPv4 address/);
    expect(bad({ 5: '10.96.0.66' })).to.match(/family "5", not "4" or "6"/);
  });

  it('round-trips DPU endpoints, writes none for a node without them, and reads an old record as it was', () => {
    const endpoints = [
      {
        id: 'dpu-0',
        underlay: '192.0.2.20',
        mtu: 1500,
        vtep: { mac: '0e:77:c0:00:02:14', vni: 30574, port: 4789 },
        prefixes: ['10.96.0.64/28', '10.96.0.100/32'],
      },
    ];
    const withDpu: NodeRecord = { ...good, endpoints };
    expect(JSON.parse(encodeRecord(withDpu))).to.deep.equal({ ...good, endpoints });
    expect(decode(JSON.parse(encodeRecord(withDpu))).record).to.deep.equal(withDpu);
    expect(JSON.parse(encodeRecord({ ...good, endpoints: [] }))).to.not.have.property('endpoints');
    expect(decode('{"node":"n2","underlay":["192.0.2.2"],"mtu":1500,"bootId":"b"}').record).to.deep.equal({
      node: 'n2',
      underlay: ['192.0.2.2'],
      mtu: 1500,
      bootId: 'b',
    });
  });

  it(`reads a record with ${MAX_RECORD_ENDPOINTS} endpoints, and refuses one with more, in words`, () => {
    const endpoints = (n: number): unknown[] =>
      Array.from({ length: n }, (_, i) => ({
        id: `dpu-${i}`,
        underlay: `192.0.${2 + (i >> 8)}.${i & 255}`,
        mtu: 1500,
        vtep: { mac: '0e:77:c0:00:02:14', vni: 30574, port: 4789 },
        prefixes: [],
      }));
    expect(decode({ ...good, endpoints: endpoints(MAX_RECORD_ENDPOINTS) }).record.endpoints).to.have.length(
      64,
    );
    expect(() => decode({ ...good, endpoints: endpoints(5000) })).to.throw(
      'lists 5000 endpoints, more than the 64 a node may have (a daemon serves at most 16 DPUs)',
    );
  });

  const bad: Array<[string, unknown, RegExp]> = [
    ['not JSON', '{', /is not JSON/],
    ['not an object', [1], /is not a JSON object/],
    ['another name', { ...good, node: 'n3' }, /names node "n3", not n2/],
    ['no underlay', { ...good, underlay: [] }, /has no underlay address/],
    ['bad underlay', { ...good, underlay: ['10.0.0.300'] }, /invalid underlay address/],
    ['bad MTU', { ...good, mtu: 70000 }, /MTU 70000, not a number 576-65535/],
    ['bad MAC', { ...good, vtep: { ...good.vtep, mac: 'zz' } }, /VTEP MAC "zz"/],
    ['bad VNI', { ...good, vtep: { ...good.vtep, vni: 0 } }, /VNI 0, not a number 1-16777215/],
    ['bad port', { ...good, vtep: { ...good.vtep, port: 65536 } }, /VTEP port 65536/],
    [
      'bad prefix',
      { ...good, prefixes: ['10.96.0.1/26'] },
      /announces an invalid prefix: 10\.96\.0\.1\/26 has host bits set/,
    ],
    [
      'a malformed endpoint',
      { ...good, endpoints: [{ id: 'd', underlay: '192.0.2.9', mtu: 1500, prefixes: [] }] },
      /has an invalid endpoint list: endpoints\[0\]\.vtep must be an object/,
    ],
    [
      'a holder that is not a stamp',
      { ...good, holder: { store: 's1' } },
      /"holder" field that is not \{"store","boot"\}/,
    ],
    ['prefixes not a list', { ...good, prefixes: '10.96.0.0/26' }, /"prefixes" field that is not a list/],
  ];
  for (const [what, value, message] of bad)
    it(`refuses a record with ${what}`, () => {
      expect(() => decode(value)).to.throw(message);
    });
});
