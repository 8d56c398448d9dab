import { expect } from 'chai';
import { OwnTransactions, SETTLE_MS } from '../../../lib/nftables/own-transactions';
import { TableTransactions } from '../../../lib/nftables/nft-notifications';
import { attrString, encodeAttributes } from '../../../lib/rtnetlink/attributes';
import type { NetlinkMessage } from '../../../lib/rtnetlink/message';

// Telling our own nf_tables transactions from others', without a kernel: whichever way a race between
// our write and another writer's goes, a change by someone else is reported (at worst, so is one of ours).

describe('OwnTransactions: our writes against the transactions heard', () => {
  let now = 0;
  let own: OwnTransactions;
  beforeEach(() => {
    now = 1_000;
    own = new OwnTransactions(() => now);
  });

  it('takes each of our transactions as ours, in a burst', () => {
    for (let i = 0; i < 50; i++) own.expect().done();
    for (let i = 0; i < 50; i++) expect(own.heard(), `transaction ${i}`).to.equal(true);
    expect(own.heard(), 'one more').to.equal(false);
  });

  it("reports our own transaction when another writer's lands while ours is in flight", () => {
    const write = own.expect();
    expect(own.heard(), "the other's, paid with our expectation").to.equal(true);
    write.done();
    expect(own.heard(), 'ours, left unpaid: reported, so the table is read back').to.equal(false);
  });

  it('reports a transaction heard after a write that failed', () => {
    own.expect().failed();
    expect(own.heard()).to.equal(false);
  });

  it('drops an expectation its write never paid (a commit that changed nothing), so a later change is reported', () => {
    own.expect().done();
    now += SETTLE_MS + 1;
    expect(own.outstanding).to.equal(0);
    expect(own.heard()).to.equal(false);
  });

  it('keeps a write in flight expected however long it takes', () => {
    const write = own.expect();
    now += 10 * SETTLE_MS;
    expect(own.outstanding).to.equal(1);
    write.done();
    expect(own.heard()).to.equal(true);
  });

  it('forgets every expectation when notifications were lost', () => {
    own.expect().done();
    own.expect();
    own.forget();
    expect(own.heard()).to.equal(false);
  });
});

describe('TableTransactions: notifications read as transactions on one table', () => {
  const NEWGEN = (10 << 8) | 15;
  const object = (msg: number, table: string, family = 1): NetlinkMessage => ({
    type: (10 << 8) | msg,
    flags: 0,
    seq: 0,
    pid: 4242,
    payload: Buffer.concat([Buffer.from([family, 0, 0, 0]), encodeAttributes([attrString(1, table)])]),
  });
  const gen: NetlinkMessage = { type: NEWGEN, flags: 0, seq: 0, pid: 0, payload: Buffer.alloc(4) };

  it('counts a transaction that changed the table once, however many objects it changed', () => {
    const t = new TableTransactions('workloadnet_policy');
    const elements = Array.from({ length: 100 }, () => object(14, 'workloadnet_policy'));
    expect(t.read([object(8, 'workloadnet_policy'), ...elements, gen])).to.equal(1);
  });

  it("ignores other tables, another family's table of our name, and transactions split across reads", () => {
    const t = new TableTransactions('workloadnet_policy');
    expect(t.read([object(12, 'other'), gen])).to.equal(0);
    expect(t.read([object(12, 'workloadnet_policy', 2), gen])).to.equal(0);
    expect(t.read([object(12, 'workloadnet_policy')])).to.equal(0);
    expect(t.read([object(12, 'other'), gen, gen])).to.equal(1);
  });

  it('forgets a transaction half heard when notifications were lost', () => {
    const t = new TableTransactions('workloadnet_policy');
    t.read([object(12, 'workloadnet_policy')]);
    t.reset();
    expect(t.read([gen])).to.equal(0);
  });
});
