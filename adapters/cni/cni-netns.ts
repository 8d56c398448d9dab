import { NetnsPathError, openNetnsPath, type OpenNetns } from '../../core/netns-path';
import { CniError, CniErrorCode } from './cni-error';

// CNI_NETNS is checked here, before the service is called, so that a bad path is answered with the
// environment error (4) it is, rather than with the network-config error that the service's
// INVALID_ARGUMENT maps to. The check itself is the core's, so both entry points accept the same paths.

/** Throws CniError 4 unless `path` is a network namespace other than the daemon's own or PID 1's. */
export async function checkNetnsPath(path: string): Promise<void> {
  (await openCheckedNetns(path)).close();
}

/** Like checkNetnsPath, but returns the namespace open (for the service call); the caller closes it. */
export async function openCheckedNetns(path: string): Promise<OpenNetns> {
  try {
    return await openNetnsPath(path);
  } catch (err) {
    if (err instanceof NetnsPathError) {
      throw new CniError(CniErrorCode.INVALID_ENVIRONMENT, `CNI_NETNS: ${err.message}`);
    }
    throw err;
  }
}
