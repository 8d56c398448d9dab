import { isRoot } from './netns';

// Suites that make real network namespaces (or enter them) need root. Run without it, such a suite is
// skipped, and its name says why, so a run that skipped it cannot be mistaken for one that passed it.

export const SKIPPED_WITHOUT_ROOT = '(skipped: needs root)';

/** `describe` as root; otherwise `describe.skip`, with the reason added to the suite's name. */
export function describeRoot(title: string, fn: (this: Mocha.Suite) => void): Mocha.Suite | void {
  return isRoot ? describe(title, fn) : describe.skip(`${title} ${SKIPPED_WITHOUT_ROOT}`, fn);
}
