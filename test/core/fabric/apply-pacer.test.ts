import { expect } from 'chai';
import { ApplyPacer } from '../../../core/fabric/apply-pacer';

// The pacer on a clock the test moves: applies cost what the test says they cost.

function rig(opts: { share?: number; burstMs?: number; maxWaitMs?: number } = {}) {
  let now = 1_000_000;
  const pacer = new ApplyPacer({ ...opts, clock: () => now });
  const apply = (ms: number) => pacer.time(async () => void (now += ms));
  const wait = (ms: number) => void (now += ms);
  return { pacer, apply, wait, now: () => now };
}

describe('fabric apply pacer', () => {
  it('lets a quiet daemon apply a burst of slow changes at once (a loaded start-up)', async () => {
    const r = rig({ share: 0.1, burstMs: 2000 });
    // Three applies of 600 ms each, back to back: within the budget, none waits.
    for (let i = 0; i < 3; i++) {
      expect(r.pacer.delay(5), `apply ${i + 1}`).to.equal(5);
      await r.apply(600);
    }
  });

  it('holds a flapping source to its share of the time over a long stretch', async () => {
    const r = rig({ share: 0.1, burstMs: 2000, maxWaitMs: 60_000 });
    const start = r.now();
    let busy = 0;
    for (let i = 0; i < 200; i++) {
      r.wait(r.pacer.delay(5));
      await r.apply(100);
      busy += 100;
    }
    const share = busy / (r.now() - start);
    // The burst is spent once; after it applies take the share, so over 200 applies just above it.
    expect(share).to.be.within(0.1, 0.12);
  });

  it('waits no longer than its cap, whatever an apply cost', async () => {
    const r = rig({ share: 0.1, burstMs: 0, maxWaitMs: 5000 });
    await r.apply(3000);
    expect(r.pacer.delay(5)).to.equal(5000);
  });

  it('refills while quiet: after a long pause the next change is applied at once', async () => {
    const r = rig({ share: 0.1, burstMs: 1000 });
    await r.apply(1500);
    expect(r.pacer.delay(5)).to.be.greaterThan(1000);
    r.wait(20_000);
    expect(r.pacer.delay(5)).to.equal(5);
  });
});
