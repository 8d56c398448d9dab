import { expect } from 'chai';
import {
  NetlinkError,
  RTM_NEWLINK,
  decodeLink,
  delLinkRequest,
  getLink,
  listAddresses,
  listLinks,
  newAddressRequest,
  newLinkRequest,
  newVethRequest,
  setLinkRequest,
  NetlinkSocket,
} from '../../../lib/rtnetlink';
import { ipJson } from '../../support/netns-fixture';
import { socketInNetns } from '../../support/netns-socket';

// The socket against a real kernel, inside a test-owned namespace.
describe('netlink socket', function () {
  this.timeout(30_000);
  const t = socketInNetns('sock', (ns) => NetlinkSocket.openIn(ns));

  /**
   * Expects which requests of a batch succeeded, the errno of the one that failed, and the MTU the batch
   * gave `dev`; then deletes `dev`.
   */
  async function expectBatch(
    s: NetlinkSocket,
    outcomes: Awaited<ReturnType<NetlinkSocket['batch']>>,
    want: { oks: boolean[]; code: string; dev: string; mtu: number },
  ): Promise<void> {
    expect(outcomes.map((o) => o.ok)).to.deep.equal(want.oks);
    const failed = outcomes[want.oks.indexOf(false)];
    expect(failed && !failed.ok && failed.error.code).to.equal(want.code);
    const [link] = await ipJson<{ mtu: number }>(t.name, 'link', 'show', want.dev);
    expect(link?.mtu).to.equal(want.mtu);
    await s.request(delLinkRequest({ name: want.dev }));
  }

  it('hands each of many concurrent requests its own answer', async () => {
    const created = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        t.sock.request(newVethRequest({ name: `c${i}a`, peer: { name: `c${i}b` } }, { echo: true })),
      ),
    );
    const links = await listLinks(t.sock);
    created.forEach((replies, i) => {
      const echoed = replies.filter((m) => m.type === RTM_NEWLINK).map(decodeLink);
      expect(echoed.map((l) => l.name)).to.deep.equal([`c${i}a`]);
      expect(links.find((l) => l.name === `c${i}a`)?.index).to.equal(echoed[0]?.index);
    });
    const lookups = await Promise.all(
      Array.from({ length: 24 }, (_, i) => getLink(t.sock, { name: `c${i}b` })),
    );
    lookups.forEach((l, i) => expect(l?.name).to.equal(`c${i}b`));
    await Promise.all(
      Array.from({ length: 24 }, (_, i) => t.sock.request(delLinkRequest({ name: `c${i}a` }))),
    );
    expect((await listLinks(t.sock)).map((l) => l.name)).to.deep.equal(['lo']);
  });

  it('reports each request of a batch separately: one failure does not hide the others', async () => {
    const outcomes = await t.sock.batch([
      newVethRequest({ name: 'b0', peer: { name: 'b1' } }),
      newVethRequest({ name: 'b0', peer: { name: 'b2' } }),
      setLinkRequest({ name: 'b0' }, { mtu: 1300 }),
    ]);
    await expectBatch(t.sock, outcomes, { oks: [true, false, true], code: 'EEXIST', dev: 'b0', mtu: 1300 });
  });

  for (const ackEveryRequest of [false, true]) {
    it(`confirms earlier requests of a batch when only a later one fails (ackEveryRequest: ${ackEveryRequest})`, async () => {
      const own = NetlinkSocket.openIn(t.ns, { ackEveryRequest });
      try {
        const outcomes = await own.batch([
          newVethRequest({ name: 'e0', peer: { name: 'e1' } }),
          setLinkRequest({ name: 'e0' }, { mtu: 1280 }),
          setLinkRequest({ name: 'missing0' }, { mtu: 1280 }),
        ]);
        await expectBatch(own, outcomes, { oks: [true, true, false], code: 'ENODEV', dev: 'e0', mtu: 1280 });
      } finally {
        await own.close();
      }
    });
  }

  for (const ackEveryRequest of [false, true]) {
    it(`settles each of 6,000 requests of one batch (240 KB: more than one write takes) by its own answer, failures anywhere (ackEveryRequest: ${ackEveryRequest})`, async () => {
      const own = NetlinkSocket.openIn(t.ns, { ackEveryRequest });
      try {
        await own.request(newVethRequest({ name: 'big0', peer: { name: 'big1' } }));
        const index = (await getLink(own, { name: 'big0' }))!.index;
        const address = (i: number): string => `10.77.${Math.floor(i / 250)}.${(i % 250) + 1}`;
        // A request repeating an earlier address fails with EEXIST; every other one succeeds.
        const repeats = new Set([1, 100, 999, 1500, 1637, 1639, 2999, 4500, 5999]);
        const reqs = Array.from({ length: 6000 }, (_, i) =>
          newAddressRequest({ index, address: address(repeats.has(i) ? i - 1 : i), prefixLength: 32 }),
        );
        const outcomes = await own.batch(reqs);
        expect(outcomes.flatMap((o, i) => (o.ok ? [] : [[i, o.error.code]]))).to.deep.equal(
          [...repeats].map((i) => [i, 'EEXIST']),
        );
        const held = await listAddresses(own, { index });
        expect(held.filter((a) => a.address.startsWith('10.77.'))).to.have.length(6000 - repeats.size);
        await own.request(delLinkRequest({ name: 'big0' }));
      } finally {
        await own.close();
      }
    });
  }

  it('surfaces errno and the kernel extended-ack message', async () => {
    await t.sock.request(setLinkRequest({ name: 'lo' }, { up: true }));
    const lo = await getLink(t.sock, { name: 'lo' });
    const add = newAddressRequest({ index: lo!.index, address: '127.0.0.9', prefixLength: 32 });
    await t.sock.request(add);
    try {
      await t.sock.request(add);
      expect.fail('adding the same address twice must fail');
    } catch (err) {
      expect(err).to.be.instanceOf(NetlinkError);
      const e = err as NetlinkError;
      expect(e.code).to.equal('EEXIST');
      expect(e.errno).to.equal(17);
    }
    try {
      await t.sock.request(newLinkRequest({ name: 'x0', kind: 'no-such-kind' }));
      expect.fail('an unknown link kind must fail');
    } catch (err) {
      const e = err as NetlinkError;
      expect(e.code).to.equal('EOPNOTSUPP');
      expect(e.extack.message, 'the kernel explains the failure').to.match(/Unknown device type/i);
      expect(e.message).to.match(/RTM_NEWLINK failed: EOPNOTSUPP .*Unknown device type/i);
    }
  });

  it('answers a lookup of a missing link with undefined rather than an error', async () => {
    expect(await getLink(t.sock, { name: 'nope0' })).to.equal(undefined);
  });

  it('runs several dumps on one socket one after another (the kernel allows one at a time)', async () => {
    const dumps = await Promise.all([
      listLinks(t.sock),
      listAddresses(t.sock),
      listLinks(t.sock),
      listAddresses(t.sock),
    ]);
    expect(dumps[0]?.map((l) => l.name)).to.include('lo');
    expect(dumps[1]?.map((a) => a.address)).to.include('127.0.0.1');
    expect(dumps[2]).to.deep.equal(dumps[0]);
  });

  it('collects a dump that spans many datagrams', async () => {
    await t.sock.batchOrThrow(
      Array.from({ length: 100 }, (_, i) => newVethRequest({ name: `d${i}a`, peer: { name: `d${i}b` } })),
    );
    const links = await listLinks(t.sock);
    expect(links.filter((l) => /^d\d+[ab]$/.test(l.name))).to.have.length(200);
    await t.sock.batchOrThrow(Array.from({ length: 100 }, (_, i) => delLinkRequest({ name: `d${i}a` })));
  });

  it('refuses requests after close', async () => {
    const other = NetlinkSocket.openIn(t.ns);
    await other.close();
    try {
      await other.request(setLinkRequest({ name: 'lo' }, {}));
      expect.fail('a closed socket must refuse');
    } catch (err) {
      expect((err as Error).message).to.match(/closed/);
    }
  });
});
