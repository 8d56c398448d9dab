import { expect } from 'chai';
import { Admission } from '../../../core/attach/admission';
import { WorkloadNetError } from '../../../core/errors';

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('attach admission', () => {
  it('refuses calls beyond maxInFlight with RESOURCE_EXHAUSTED, and admits again once they finish', async () => {
    const a = new Admission(2, 1);
    const first = a.run(() => sleep(20));
    const second = a.run(() => sleep(1));
    let refused: unknown;
    await a.run(async () => undefined).catch((err: unknown) => (refused = err));
    expect(refused).to.be.instanceOf(WorkloadNetError);
    expect((refused as WorkloadNetError).code).to.equal('RESOURCE_EXHAUSTED');
    await Promise.all([first, second]);
    expect(await a.run(async () => 'ok')).to.equal('ok');
  });

  it('never runs more than `concurrency` at once, and starts waiters in arrival order', async () => {
    const a = new Admission(100, 3, 100);
    let running = 0;
    let peak = 0;
    const started: number[] = [];
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        a.run(async () => {
          started.push(i);
          peak = Math.max(peak, ++running);
          await sleep(2 + (i % 3));
          running--;
        }),
      ),
    );
    expect(peak).to.equal(3);
    expect(started).to.deep.equal(Array.from({ length: 12 }, (_, i) => i));
  });

  it('starts at most `startsPerTurn` calls in one turn of the event loop, the rest in the next turns', async () => {
    const a = new Admission(100, 10, 3);
    const started: number[] = [];
    const calls = Array.from({ length: 10 }, (_, i) =>
      a.run(async () => {
        started.push(i);
        await sleep(5);
      }),
    );
    await Promise.resolve();
    expect(started).to.have.length(3);
    await nextTurn();
    expect(started).to.have.length(6);
    await nextTurn();
    expect(started).to.have.length(9);
    await Promise.all(calls);
    expect(started).to.deep.equal(Array.from({ length: 10 }, (_, i) => i));
  });

  it('lets a newcomer not overtake calls already waiting for their turn', async () => {
    const a = new Admission(100, 10, 1);
    const started: string[] = [];
    const calls = ['a', 'b', 'c'].map((name) => a.run(async () => void started.push(name)));
    await Promise.resolve();
    expect(started).to.deep.equal(['a']);
    calls.push(a.run(async () => void started.push('late')));
    await Promise.all(calls);
    expect(started).to.deep.equal(['a', 'b', 'c', 'late']);
  });

  it('refuses a concurrency or pace that is not a positive integer', () => {
    expect(() => new Admission(1, 0)).to.throw(RangeError, /concurrency/);
    expect(() => new Admission(1, 1, 1.5)).to.throw(RangeError, /startsPerTurn/);
  });
});
