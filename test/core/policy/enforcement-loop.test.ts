import { expect } from 'chai';
import { EnforcementLoop } from '../../../core/policy/enforcement-loop';
import type { CompiledPolicy, PolicyDataplane, PolicyDenials } from '../../../core/policy-dataplane';

// The loop that takes a backend's program to its dataplane: each caller waits for the apply that
// holds its change, and no change is left behind by an apply that was just ending.

class CountingDataplane implements PolicyDataplane {
  readonly where = 'host' as const;
  applies = 0;
  async apply(): Promise<void> {
    this.applies++;
  }
  invalidate(): void {}
  async denied(): Promise<ReadonlyMap<string, PolicyDenials>> {
    return new Map();
  }
  async remove(): Promise<void> {}
}

const EMPTY: CompiledPolicy = { sets: new Map(), pods: new Map() };

describe('NetworkPolicy enforcement loop', () => {
  it('applies a change made the moment the apply before it released its waiter', async () => {
    const dataplane = new CountingDataplane();
    const loop = new EnforcementLoop({ dataplane, program: () => EMPTY, applied: () => undefined });
    await loop.until(loop.changed());
    // Made by the released waiter, before the ending apply has let go of the loop.
    const next = loop.changed();
    const settled = await Promise.race([
      loop.until(next).then(() => 'applied'),
      new Promise((r) => setTimeout(() => r('left behind'), 500)),
    ]);
    expect(settled).to.equal('applied');
    expect(dataplane.applies).to.equal(2);
    await loop.stop();
  });
});
