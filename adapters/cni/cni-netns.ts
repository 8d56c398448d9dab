import { NetnsError } from '../../lib/netns/netns-error';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import { CniError, CniErrorCode } from './cni-error';

// A CNI_NETNS that is not a usable network namespace is the runtime's environment at fault: CNI code 4,
// not the network-config error (7) that other invalid arguments map to. The core opens and checks the
// namespace (one check for every entry point); this only translates its typed error.

/** CniError 4 for a namespace error from the core; anything else unchanged. */
export function netnsEnvironmentError(err: unknown): unknown {
  if (err instanceof NetnsError)
    return new CniError(CniErrorCode.INVALID_ENVIRONMENT, `CNI_NETNS: ${err.message}`);
  return err;
}

/** Throws CniError 4 unless `path` is a network namespace a workload may use (CHECK's precondition). */
export async function checkNetnsPath(path: string): Promise<void> {
  try {
    (await NetnsHandle.open(path, { workload: true })).close();
  } catch (err) {
    throw netnsEnvironmentError(err);
  }
}
