import type fc from 'fast-check';
import { TORTURE_SEED } from './torture-settings';

// The fuzz suites' bookkeeping: how many inputs each property tried (printed after the suite, so a run
// shows it fuzzed what it claims), and fast-check's parameters with the suites' one seed.

export interface FuzzTally {
  /** Inputs tried, by property name. */
  readonly tried: Record<string, number>;
  /** Counts one input of the property `name`. */
  count(name: string): void;
  /** fast-check parameters: `numRuns` inputs from the suites' seed, stopping at the first failure. */
  params(numRuns: number): fc.Parameters<unknown>;
}

export function fuzzTally(): FuzzTally {
  const tried: Record<string, number> = {};
  return {
    tried,
    count: (name) => void (tried[name] = (tried[name] ?? 0) + 1),
    params: (numRuns) => ({ numRuns, seed: TORTURE_SEED, endOnFailure: true }),
  };
}
