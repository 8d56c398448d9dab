import type { DpuPortOptions } from './backend';
import { invalidArgument } from './errors';

// A DPU port's VF settings are checked by the same rules wherever they come from: an Attach call (the
// core validates it before anything changes) or a CNI network config the DPU backend reads.

const MAX_RATE_MBPS = 10_000_000;

/** VF settings: whole rates in Mbit/s (min not above max), a known link state, a PF index. */
export function validateDpuPort(o: DpuPortOptions | undefined): DpuPortOptions | undefined {
  if (!o) return undefined;
  const out: DpuPortOptions = {};
  for (const k of ['maxTxRateMbps', 'minTxRateMbps', 'pf'] as const) {
    const v = o[k];
    if (v === undefined) continue;
    if (!Number.isSafeInteger(v) || v < 0 || v > MAX_RATE_MBPS)
      throw invalidArgument(`${k} must be a whole number from 0 to ${MAX_RATE_MBPS}, got ${String(v)}`);
    out[k] = v;
  }
  if (out.maxTxRateMbps && out.minTxRateMbps && out.minTxRateMbps > out.maxTxRateMbps)
    throw invalidArgument(
      `minTxRateMbps (${out.minTxRateMbps}) must not be above maxTxRateMbps (${out.maxTxRateMbps})`,
    );
  for (const k of ['spoofCheck', 'trust'] as const) {
    const v = o[k];
    if (v === undefined) continue;
    if (typeof v !== 'boolean') throw invalidArgument(`${k} must be true or false`);
    out[k] = v;
  }
  if (o.linkState !== undefined) {
    if (!['auto', 'enable', 'disable'].includes(o.linkState))
      throw invalidArgument(`linkState must be auto, enable or disable, got ${JSON.stringify(o.linkState)}`);
    out.linkState = o.linkState;
  }
  return Object.keys(out).length ? out : undefined;
}
