import { expect } from 'chai';
import { DEFAULT_CONFIG } from '../../../core/config';
import { mergeConfig } from '../../../core/daemon/config-check';
import { expectError } from '../../support/expect-error';

// The options of the DPUs' prefix slices: dpu.fabricSlices and fabric.strictSlices.

describe('slice configuration', () => {
  it('cuts ranges in 4 by default and borrows rather than refuses', () => {
    const c = mergeConfig(DEFAULT_CONFIG);
    expect(c.dpu.fabricSlices).to.equal(4);
    expect(c.fabric.strictSlices).to.equal(false);
    expect(
      mergeConfig(DEFAULT_CONFIG, { dpu: { fabricSlices: 8 }, fabric: { strictSlices: true } }).dpu,
    ).to.have.property('fabricSlices', 8);
  });

  it('refuses a slice count that is not a power of two in 1..256, saying what it must be', () => {
    for (const bad of [0, 3, 6, 512, 2.5]) {
      expectError(
        () => mergeConfig(DEFAULT_CONFIG, { dpu: { fabricSlices: bad } }),
        'INVALID_ARGUMENT',
        new RegExp(`dpu\\.fabricSlices must be a power of two in 1\\.\\.256 .*not ${bad}$`),
      );
    }
  });

  it('refuses a strictSlices that is not true or false', () => {
    expectError(
      () => mergeConfig(DEFAULT_CONFIG, { fabric: { strictSlices: 'yes' as unknown as boolean } }),
      'INVALID_ARGUMENT',
      /fabric\.strictSlices must be true or false, not "yes"/,
    );
  });
});
