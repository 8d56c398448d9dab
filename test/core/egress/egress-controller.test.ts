import { expect } from 'chai';
import type { EgressDataplane, EgressRanges } from '../../../core/backend';
import { EgressController } from '../../../core/egress/egress-controller';
import { silentLogger } from '../../../core/logger';

// The controller's promise to an attach: a range that arrived is masqueraded before the attach that
// uses it is answered (inStep), and nothing is waited for when no change is pending. The dataplane is
// a recording one here; the nftables table itself is tested against the kernel
// (test/backends/linux/egress-masquerade.test.ts, test/integration/egress-masquerade.test.ts).

/** A dataplane whose applies finish when the test says so. */
class HeldDataplane implements EgressDataplane {
  readonly applied: EgressRanges[] = [];
  failWith?: string;
  private release: Array<() => void> = [];
  held = false;

  async apply(ranges: EgressRanges): Promise<void> {
    if (this.held) await new Promise<void>((r) => this.release.push(r));
    if (this.failWith) throw new Error(this.failWith);
    this.applied.push(ranges);
  }
  invalidate(): void {}
  finish(): void {
    for (const r of this.release.splice(0)) r();
  }
}

describe('egress controller: an attach waits for its range to be masqueraded', () => {
  let pods: string[];
  let dp: HeldDataplane;
  let controller: EgressController;

  beforeEach(async () => {
    pods = [];
    dp = new HeldDataplane();
    controller = new EgressController({
      targets: [{ backend: 'linux', dataplane: dp, podRanges: () => [...pods] }],
      clusterRanges: () => [...pods],
      intervalMs: 3_600_000,
      log: silentLogger(),
    });
    await controller.start();
  });
  afterEach(() => controller.stop());

  it('has nothing to wait for while no change is pending', () => {
    expect(controller.inStep()).to.equal(undefined);
  });

  it('holds an attach until the pass that applies a range told of has finished', async () => {
    dp.held = true;
    pods.push('10.244.37.0/24');
    controller.changed();
    const waiting = controller.inStep();
    expect(waiting, 'a pass to wait for').to.not.equal(undefined);
    let done = false;
    void waiting?.then(() => (done = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(done, 'answered before the table had the range').to.equal(false);
    dp.finish();
    await waiting;
    expect(dp.applied.at(-1)?.pod).to.deep.equal(['10.244.37.0/24']);
    expect(controller.inStep(), 'nothing pending once applied').to.equal(undefined);
  });

  it('does not hold attaches behind a dataplane that cannot be written', async () => {
    dp.failWith = 'nft: not found';
    pods.push('10.244.38.0/24');
    controller.changed();
    await controller.inStep();
    expect(controller.inStep()).to.equal(undefined);
  });
});
