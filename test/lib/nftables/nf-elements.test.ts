import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { NftablesError } from '../../../lib/nftables/libnftables';
import { NfElementWriter } from '../../../lib/nftables/nf-elements';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { NetnsSet, type TestNamespace } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { requireProgram } from '../../support/system-program';

// Set elements written over nf_tables netlink: in the namespace the writer was made in, all of a batch
// or none of it, and a refusal said in words.

const nft = (ns: TestNamespace, script: string): string =>
  execFileSync('ip', ['netns', 'exec', ns.name, 'nft', '-f', '-'], { input: script, encoding: 'utf8' });

const elements = (ns: TestNamespace, set: string): string[] => {
  const listing = execFileSync(
    'ip',
    ['netns', 'exec', ns.name, 'nft', '-j', 'list', 'set', 'inet', 'wnel', set],
    { encoding: 'utf8' },
  );
  const doc = JSON.parse(listing) as { nftables: { set?: { elem?: string[] } }[] };
  return (doc.nftables.find((o) => o.set)?.set?.elem ?? []).slice().sort();
};

describeRoot('nf_tables set elements over netlink (root, test-owned namespaces)', function () {
  this.timeout(30_000);
  const nss = new NetnsSet('wnnfe-');
  let ns: TestNamespace;
  let writer: NfElementWriter;

  before(() => requireProgram('nft'));

  beforeEach(async () => {
    ns = nss.add();
    nft(
      ns,
      'add table inet wnel\nadd set inet wnel a { type ipv4_addr; }\nadd set inet wnel b { type ipv6_addr; }\n' +
        'add element inet wnel a { 10.0.0.1 }\n',
    );
    const handle = await NetnsHandle.open(ns.path);
    writer = NfElementWriter.open(handle);
    handle.close();
  });

  afterEach(() => writer.close());
  after(() => nss.cleanup());

  it('adds and deletes elements of several sets, in the namespace it was made in', async () => {
    await writer.write('wnel', [
      { set: 'a', add: ['10.0.0.2', '10.0.0.3'], delete: ['10.0.0.1'] },
      { set: 'b', add: ['fd00::1'], delete: [] },
    ]);
    expect(elements(ns, 'a')).to.deep.equal(['10.0.0.2', '10.0.0.3']);
    expect(elements(ns, 'b')).to.deep.equal(['fd00::1']);
  });

  it('applies none of a batch when one change is refused, and says which, in words', async () => {
    const err = await writer
      .write('wnel', [
        { set: 'b', add: ['fd00::2'], delete: [] },
        { set: 'a', add: [], delete: ['10.0.0.9'] },
      ])
      .then(
        () => undefined,
        (e: unknown) => e as Error,
      );
    expect(err).to.be.instanceOf(NftablesError);
    expect(err?.message).to.match(/deleting elements of set a failed: ENOENT/);
    expect(err?.message).to.match(/nothing was changed/);
    expect(elements(ns, 'b')).to.deep.equal([]);
    expect(elements(ns, 'a')).to.deep.equal(['10.0.0.1']);
    // The socket is still usable after a refusal.
    await writer.write('wnel', [{ set: 'a', add: ['10.0.0.4'], delete: [] }]);
    expect(elements(ns, 'a')).to.deep.equal(['10.0.0.1', '10.0.0.4']);
  });

  it('adds and deletes interface names in a verdict map (each jumping to its chain) and in a counting set', async () => {
    nft(
      ns,
      'add chain inet wnel c1\nadd chain inet wnel c2\n' +
        'add map inet wnel m { type ifname : verdict; }\nadd set inet wnel d { type ifname; counter; }\n' +
        'add element inet wnel m { "wn1" : jump c1 }\n',
    );
    await writer.write('wnel', [
      {
        set: 'm',
        keys: 'ifname',
        add: ['wn2', 'wn1'],
        delete: ['wn1'],
        jumps: new Map([
          ['wn2', 'c2'],
          ['wn1', 'c2'],
        ]),
      },
      { set: 'd', keys: 'ifname', add: ['wn2'], delete: [] },
    ]);
    const listing = execFileSync('ip', ['netns', 'exec', ns.name, 'nft', 'list', 'table', 'inet', 'wnel'], {
      encoding: 'utf8',
    });
    expect(listing).to.match(/"wn1" : jump c2,\s+"wn2" : jump c2/);
    // An element added without its own expressions takes the set's counter, as `nft add element` does.
    expect(listing).to.match(/elements = \{ "wn2" counter packets 0 bytes 0 \}/);
  });
});
