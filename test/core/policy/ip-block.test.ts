import { expect } from 'chai';
import { blockElements } from '../../../core/policy/address-sets';
import { addressPrefix, mergePrefixes, parseBlockCidr } from '../../../core/policy/ip-block';
import { canonicalSelector, selectorMatches } from '../../../core/policy/label-selector';

describe('policy ipBlocks: a cidr minus its excepts, as prefixes', () => {
  it('splits an IPv4 block around its excepts', () => {
    expect(blockElements('10.0.0.0/24', ['10.0.0.0/26', '10.0.0.128/32'])).to.deep.equal([
      '10.0.0.64/26',
      '10.0.0.129/32',
      '10.0.0.130/31',
      '10.0.0.132/30',
      '10.0.0.136/29',
      '10.0.0.144/28',
      '10.0.0.160/27',
      '10.0.0.192/26',
    ]);
  });

  it('splits an IPv6 block around its except', () => {
    expect(blockElements('fd00::/126', ['fd00::1/128'])).to.deep.equal(['fd00::/128', 'fd00::2/127']);
  });

  it('allows nothing when an except covers the whole block, and ignores excepts of the other family', () => {
    expect(blockElements('10.1.0.0/16', ['10.0.0.0/8'])).to.deep.equal([]);
    expect(blockElements('10.1.0.0/16', ['fd00::/8'])).to.deep.equal(['10.1.0.0/16']);
  });

  it('masks host bits the API accepts, and allows nothing for text that is no CIDR', () => {
    expect(blockElements('10.1.2.3/16', [])).to.deep.equal(['10.1.0.0/16']);
    expect(blockElements('not-a-cidr', [])).to.deep.equal([]);
  });

  it('merges prefixes so that none covers another, IPv4 first, by address', () => {
    const p = (t: string) => addressPrefix(t)!;
    const b = (t: string) => parseBlockCidr(t)!;
    expect(
      mergePrefixes([b('10.1.0.0/16'), b('10.0.0.0/8'), b('9.0.0.0/8'), b('10.2.3.0/24')]),
    ).to.deep.equal(['9.0.0.0/8', '10.0.0.0/8']);
    expect(mergePrefixes([p('fd00::1'), p('10.0.0.2'), p('10.0.0.1'), p('10.0.0.1')])).to.deep.equal([
      '10.0.0.1/32',
      '10.0.0.2/32',
      'fd00::1/128',
    ]);
  });
});

describe('policy label selectors', () => {
  const labels = { app: 'web', tier: 'fe' };
  it('selects everything with an empty selector', () => {
    expect(selectorMatches({}, {})).to.equal(true);
  });
  it('holds matchLabels and every operator of matchExpressions together', () => {
    expect(selectorMatches({ matchLabels: { app: 'web' } }, labels)).to.equal(true);
    expect(selectorMatches({ matchLabels: { app: 'db' } }, labels)).to.equal(false);
    const expr = (operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist', key: string, values?: string[]) =>
      selectorMatches({ matchExpressions: [{ key, operator, values }] }, labels);
    expect([expr('In', 'app', ['web', 'db']), expr('In', 'app', ['db'])]).to.deep.equal([true, false]);
    expect([
      expr('NotIn', 'app', ['db']),
      expr('NotIn', 'missing', ['x']),
      expr('NotIn', 'app', ['web']),
    ]).to.deep.equal([true, true, false]);
    expect([
      expr('Exists', 'tier'),
      expr('Exists', 'x'),
      expr('DoesNotExist', 'x'),
      expr('DoesNotExist', 'tier'),
    ]).to.deep.equal([true, false, true, false]);
    expect(
      selectorMatches(
        { matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['be'] }] },
        labels,
      ),
    ).to.equal(false);
  });
  it('gives one canonical text for two spellings of the same selector', () => {
    const a = {
      matchLabels: { a: '1', b: '2' },
      matchExpressions: [{ key: 'k', operator: 'In' as const, values: ['y', 'x'] }],
    };
    const b = {
      matchLabels: { b: '2', a: '1' },
      matchExpressions: [{ key: 'k', operator: 'In' as const, values: ['x', 'y', 'x'] }],
    };
    expect(canonicalSelector(a)).to.equal(canonicalSelector(b));
  });
});
