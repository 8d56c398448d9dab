import { expect } from 'chai';
import fc from 'fast-check';
import net from 'node:net';
import {
  CidrError,
  addressToBytes,
  cidrContains,
  formatAddress,
  parseAddress,
  parseCidr,
} from '../../lib/cidr';
import { asWorkloadNetError } from '../../core/errors';
import { expectError } from '../support/expect-error';

/** Whether parseAddress accepts `text`; a refusal must be a CidrError the daemon answers INVALID_ARGUMENT. */
function accepted(text: string): boolean {
  try {
    parseAddress(text);
    return true;
  } catch (err) {
    expect(err).to.be.instanceOf(CidrError);
    expect(asWorkloadNetError(err).code).to.equal('INVALID_ARGUMENT');
    return false;
  }
}

/** What a WHATWG URL parser (an independent RFC 5952-style serializer) makes of an IPv6 address. */
const whatwgIpv6 = (text: string): string => new URL(`http://[${text}]/`).hostname.slice(1, -1);

const V4_MAX = 2 ** 32 - 1;
const V6_MAX = (1n << 128n) - 1n;
const isV4Mapped = (v: bigint): boolean => v >> 32n === 0xffffn;

/** IPv6 values with runs of zero groups, which is where canonical formatting gets interesting. */
const v6WithZeroRuns = fc
  .array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 0xffff })), { minLength: 8, maxLength: 8 })
  .map((groups) => groups.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n));
const v6Value = fc.oneof(fc.bigInt({ min: 0n, max: V6_MAX }), v6WithZeroRuns);

describe('cidr', () => {
  describe('addresses', () => {
    it('formats and parses every IPv4 value back to itself, in strict dotted decimal', () => {
      fc.assert(
        fc.property(fc.integer({ min: 0, max: V4_MAX }), (n) => {
          const text = formatAddress(4, BigInt(n));
          const octets = [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
          expect(text).to.equal(octets.join('.'));
          expect(parseAddress(text)).to.deep.equal({ family: 4, value: BigInt(n) });
        }),
      );
    });

    it('formats and parses every IPv6 value back to itself, matching the WHATWG serializer', () => {
      fc.assert(
        fc.property(v6Value, (v) => {
          const text = formatAddress(6, v);
          expect(parseAddress(text)).to.deep.equal({ family: 6, value: v });
          expect(text).to.equal(text.toLowerCase());
          if (!isV4Mapped(v)) expect(text).to.equal(whatwgIpv6(text));
        }),
        { numRuns: 500 },
      );
    });

    it('parses every IPv6 spelling (leading zeros, "::", embedded IPv4) to the same value the WHATWG parser does', () => {
      fc.assert(
        fc.property(fc.ipV6(), (text) => {
          const { family, value } = parseAddress(text);
          expect(family).to.equal(6);
          const canonical = formatAddress(6, value);
          if (!isV4Mapped(value)) expect(canonical).to.equal(whatwgIpv6(text));
          expect(parseAddress(canonical).value).to.equal(value);
        }),
        { numRuns: 500 },
      );
    });

    it('accepts exactly the IPv4 spellings Node accepts (no octal, hex or short forms)', () => {
      const v4ish = fc.oneof(
        fc.ipV4(),
        fc.ipV4Extended(),
        fc.string({ unit: fc.constantFrom('0', '1', '2', '5', '9', '.', 'x', ' '), maxLength: 18 }),
      );
      fc.assert(
        fc.property(v4ish, (text) => {
          fc.pre(!text.includes(':'));
          expect(accepted(text), text).to.equal(net.isIPv4(text));
        }),
        { numRuns: 1000 },
      );
    });

    it('accepts exactly the IPv6 spellings Node accepts', () => {
      const v6ish = fc.oneof(
        fc.ipV6(),
        fc.string({ unit: fc.constantFrom('0', '1', 'a', 'F', 'g', ':', ':', '.', '2', '5'), maxLength: 24 }),
      );
      fc.assert(
        fc.property(v6ish, (text) => {
          fc.pre(text.includes(':'));
          expect(accepted(text), text).to.equal(net.isIPv6(text));
        }),
        { numRuns: 2000 },
      );
    });

    const canonical: Array<[string, string]> = [
      ['FD00:0:0:0:0:0:0:1', 'fd00::1'],
      ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1'],
      ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
      ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
      ['2001:0:0:1:0:0:0:1', '2001:0:0:1::1'],
      ['0:0:0:0:0:0:0:0', '::'],
      ['0:0:0:0:0:0:0:1', '::1'],
      ['fd00:0:0:0:0:0:0:0', 'fd00::'],
      ['1:0:0:0:0:0:0:0', '1::'],
      ['::FFFF:10.0.0.1', '::ffff:10.0.0.1'],
      ['::ffff:a00:1', '::ffff:10.0.0.1'],
      ['::10.0.0.1', '::a00:1'],
      ['64:ff9b::192.0.2.33', '64:ff9b::c000:221'],
    ];
    for (const [input, output] of canonical) {
      it(`writes ${input} as ${output} (RFC 5952)`, () => {
        const { family, value } = parseAddress(input);
        expect(formatAddress(family, value)).to.equal(output);
      });
    }

    const garbage = [
      '',
      'localhost',
      '10.0.0',
      '10.0.0.256',
      '010.0.0.1',
      '0x0a.0.0.1',
      '1.2.3.4.5',
      ' 10.0.0.1',
      '10.0.0.1/32',
      'fd00::1::2',
      'fe80::1%eth0',
      'gggg::',
      '1:2:3:4:5:6:7:8:9',
      '1:2:3:4:5:6:7:8::',
      '1.2.3.4::',
      '::ffff:1.2.3.04',
      '12345::',
      ':1::',
      'a'.repeat(100),
    ];
    for (const text of garbage) {
      it(`rejects ${JSON.stringify(text.length > 20 ? `${text.slice(0, 20)}…` : text)} with INVALID_ARGUMENT`, () => {
        expectError(
          () => parseAddress(text),
          'INVALID_ARGUMENT',
          /is not (an IP address|a valid IPv[46] address)/,
        );
      });
    }

    it('rejects values that do not fit the family when formatting', () => {
      expectError(() => formatAddress(4, 1n << 32n), 'INVALID_ARGUMENT');
      expectError(() => formatAddress(6, -1n), 'INVALID_ARGUMENT');
    });

    it('turns addresses into network-order bytes of the family size', () => {
      expect([...addressToBytes('10.88.0.5')]).to.deep.equal([10, 88, 0, 5]);
      expect(addressToBytes('fd00::5').toString('hex')).to.equal('fd000000000000000000000000000005');
      fc.assert(
        fc.property(v6Value, (v) => {
          const bytes = addressToBytes(formatAddress(6, v));
          expect(bytes.length).to.equal(16);
          expect(BigInt(`0x${bytes.toString('hex')}`)).to.equal(v);
        }),
      );
      fc.assert(
        fc.property(fc.ipV4(), (text) => {
          expect([...addressToBytes(text)]).to.deep.equal(text.split('.').map(Number));
        }),
      );
    });
  });

  describe('prefixes', () => {
    const cidrParts = fc.oneof(
      fc.record({
        family: fc.constant(4 as const),
        prefix: fc.integer({ min: 0, max: 32 }),
        v: fc.bigInt({ min: 0n, max: BigInt(V4_MAX) }),
      }),
      fc.record({ family: fc.constant(6 as const), prefix: fc.integer({ min: 0, max: 128 }), v: v6Value }),
    );

    it('round-trips every network through its canonical text', () => {
      fc.assert(
        fc.property(cidrParts, ({ family, prefix, v }) => {
          const hostBits = BigInt((family === 4 ? 32 : 128) - prefix);
          const network = (v >> hostBits) << hostBits;
          const text = `${formatAddress(family, network)}/${prefix}`;
          const c = parseCidr(text);
          expect(c).to.deep.equal({ family, network, prefixLength: prefix, text });
          expect(parseCidr(c.text)).to.deep.equal(c);
        }),
        { numRuns: 500 },
      );
    });

    it('canonicalises the address part', () => {
      expect(parseCidr('FD00:0:0:0::/64').text).to.equal('fd00::/64');
      expect(parseCidr('2001:DB8:0:0:0:0:0:0/32').text).to.equal('2001:db8::/32');
      expect(parseCidr('10.88.0.0/16')).to.deep.equal({
        family: 4,
        network: 0x0a580000n,
        prefixLength: 16,
        text: '10.88.0.0/16',
      });
    });

    it('rejects a network with host bits set and names the network that was probably meant', () => {
      expectError(
        () => parseCidr('10.88.0.1/16'),
        'INVALID_ARGUMENT',
        '10.88.0.1/16 has host bits set; did you mean 10.88.0.0/16?',
      );
      expectError(
        () => parseCidr('fd00::1/64'),
        'INVALID_ARGUMENT',
        'fd00::1/64 has host bits set; did you mean fd00::/64?',
      );
    });

    it('rejects prefix lengths out of range for the family', () => {
      expectError(() => parseCidr('10.88.0.0/33'), 'INVALID_ARGUMENT', /out of range for IPv4 \(0-32\)/);
      expectError(() => parseCidr('fd00::/129'), 'INVALID_ARGUMENT', /out of range for IPv6 \(0-128\)/);
    });

    for (const text of [
      '10.88.0.0',
      '10.88.0.0/',
      '10.88.0.0/016',
      '10.88.0.0/-1',
      '10.88.0.0/ 16',
      '10.88.0.0/16/1',
      '/16',
      'x/16',
      '10.88.0.256/24',
    ]) {
      it(`rejects ${JSON.stringify(text)} as a CIDR with INVALID_ARGUMENT`, () => {
        expectError(() => parseCidr(text), 'INVALID_ARGUMENT', /not a CIDR/);
      });
    }

    it('contains exactly the addresses that share the network bits', () => {
      fc.assert(
        fc.property(
          fc.integer({ min: 0, max: 32 }),
          fc.integer({ min: 0, max: V4_MAX }),
          fc.integer({ min: 0, max: V4_MAX }),
          (prefix, a, b) => {
            const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
            const c = parseCidr(`${formatAddress(4, BigInt((a & mask) >>> 0))}/${prefix}`);
            expect(cidrContains(c, BigInt(a))).to.equal(true);
            expect(cidrContains(c, BigInt(b))).to.equal((a & mask) >>> 0 === (b & mask) >>> 0);
          },
        ),
      );
      const c = parseCidr('fd00::/64');
      expect(cidrContains(c, parseAddress('fd00::ffff:ffff:ffff:ffff').value)).to.equal(true);
      expect(cidrContains(c, parseAddress('fd00:0:0:1::').value)).to.equal(false);
      expect(cidrContains(parseCidr('0.0.0.0/0'), 1n << 32n)).to.equal(false);
    });
  });
});
