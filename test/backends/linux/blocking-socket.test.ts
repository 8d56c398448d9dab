import { expect } from 'chai';
import {
  BlockingNetlinkSocket,
  NetlinkError,
  RTM_NEWLINK,
  decodeLink,
  delLinkRequest,
  newVethRequest,
  setLinkRequest,
} from '../../../lib/rtnetlink';
import { ipJson } from '../../support/netns-fixture';
import { socketInNetns } from '../../support/netns-socket';

// The synchronous socket the netlink thread uses, against a real kernel in a test-owned namespace
// (here on the test's main thread, which is fine for a test: each call is short).
describe('blocking netlink socket', function () {
  this.timeout(30_000);
  const t = socketInNetns('bsock', (ns) => BlockingNetlinkSocket.openIn(ns));

  it('returns the echo of a create, and acts inside the namespace it was opened in', async () => {
    const replies = t.sock.request(newVethRequest({ name: 'x0', peer: { name: 'x1' } }, { echo: true }));
    const echoed = replies.filter((m) => m.type === RTM_NEWLINK).map(decodeLink);
    expect(echoed.map((l) => l.name)).to.deep.equal(['x0']);
    const links = await ipJson<{ ifname: string; ifindex: number }>(t.name, 'link', 'show', 'dev', 'x0');
    expect(links[0]?.ifindex).to.equal(echoed[0]?.index);
    t.sock.request(delLinkRequest({ name: 'x0' }));
  });

  it('reports each request of a batch separately, confirming those before a failure without their own ACK', async () => {
    const outcomes = t.sock.batch([
      newVethRequest({ name: 'b0', peer: { name: 'b1' } }),
      setLinkRequest({ name: 'b0' }, { mtu: 1300 }),
      setLinkRequest({ name: 'missing0' }, { mtu: 1300 }),
      setLinkRequest({ name: 'b0' }, { mtu: 1280 }),
    ]);
    expect(outcomes.map((o) => o.ok)).to.deep.equal([true, true, false, true]);
    const failed = outcomes[2];
    expect(failed && !failed.ok && failed.error).to.be.instanceOf(NetlinkError);
    expect(failed && !failed.ok && failed.error.code).to.equal('ENODEV');
    const [b0] = await ipJson<{ mtu: number }>(t.name, 'link', 'show', 'b0');
    expect(b0?.mtu).to.equal(1280);
    t.sock.request(delLinkRequest({ name: 'b0' }));
  });

  it("throws a request's own failure with the kernel's errno", () => {
    expect(() => t.sock.request(delLinkRequest({ name: 'nothere0' })))
      .to.throw(NetlinkError)
      .with.property('code', 'ENODEV');
  });

  it('keeps answering after a failure (sequence numbers stay in step)', () => {
    for (let i = 0; i < 3; i++) {
      expect(() => t.sock.request(delLinkRequest({ name: 'nothere0' }))).to.throw(NetlinkError);
      t.sock.request(newVethRequest({ name: `s${i}`, peer: { name: `s${i}p` } }));
      t.sock.request(delLinkRequest({ name: `s${i}` }));
    }
  });

  it('refuses to be used once closed', () => {
    const own = BlockingNetlinkSocket.openIn(t.ns);
    own.close();
    expect(() => own.batch([setLinkRequest({ name: 'lo' }, {})]))
      .to.throw(NetlinkError)
      .with.property('code', 'EBADF');
  });
});
