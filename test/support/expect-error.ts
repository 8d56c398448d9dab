import { expect } from 'chai';
import { knownWorkloadNetError, type WorkloadNetError, type ErrorCode } from '../../core/errors';

// Errors as callers see them: a WorkloadNetError whose code (and message) a person can act on. One
// place to assert that, for a call that throws and for a promise that rejects. A lib/ error counts with
// the code the daemon gives it (core/errors.ts), as the API and CNI would answer it.

/** Stands for "nothing was thrown", which no error can be mistaken for. */
const NOTHING: unique symbol = Symbol('nothing thrown');

/** Asserts that `thrown` is a WorkloadNetError (or a lib/ error), of `code` and with `message` when given. */
function workloadNetError(thrown: unknown, code?: ErrorCode, message?: RegExp | string): WorkloadNetError {
  const e = knownWorkloadNetError(thrown);
  expect(e, `not an error the daemon expects: ${String(thrown)}`).to.not.equal(undefined);
  if (e === undefined) throw new Error('unreachable');
  if (code !== undefined) expect(e.code, e.message).to.equal(code);
  if (typeof message === 'string') expect(e.message).to.equal(message);
  else if (message) expect(e.message).to.match(message);
  return e;
}

/**
 * Calls `fn`, which must throw a WorkloadNetError of `code` (whose message equals or matches `message`
 * when given), and returns the error.
 */
export function expectError(fn: () => unknown, code: ErrorCode, message?: RegExp | string): WorkloadNetError {
  let thrown: unknown = NOTHING;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  if (thrown === NOTHING) expect.fail(`expected a ${code} error`);
  return workloadNetError(thrown, code, message);
}

/** Awaits `p`, which must reject with a WorkloadNetError (of `code` when given), and returns the error. */
export async function rejection(p: Promise<unknown>, code?: ErrorCode): Promise<WorkloadNetError> {
  const thrown = await p.then(
    () => NOTHING,
    (err: unknown) => err,
  );
  if (thrown === NOTHING) expect.fail(`expected a ${code ?? 'WorkloadNetError'} rejection, but it succeeded`);
  return workloadNetError(thrown, code);
}
