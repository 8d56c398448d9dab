import { asWorkloadNetError } from '../errors';
import type { Metrics } from '../metrics';

// The latency and result code of every API operation of the attach flow, recorded around it. Its own
// file because measuring is a wrapper around the flow, the same for Attach and Detach, and not a step
// of either.

/** Runs one API operation and records its latency and result code under `label.backend`. */
export async function metered<T>(
  metrics: Metrics,
  op: string,
  label: { backend: string },
  fn: () => Promise<T>,
): Promise<T> {
  const start = process.hrtime.bigint();
  let code = 'OK';
  try {
    return await fn();
  } catch (err) {
    code = asWorkloadNetError(err).code;
    throw err;
  } finally {
    metrics.observe(op, label.backend, code, Number(process.hrtime.bigint() - start) / 1e9);
  }
}
