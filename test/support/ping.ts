import { execFile } from 'node:child_process';
import { requireProgram } from './system-program';

// Reachability between test-owned namespaces: ping(8) run inside one of them. Asynchronous, so that a
// daemon or backend running in the test process keeps answering (heartbeats, API calls) meanwhile.

export interface PingOptions {
  /** Echo requests to send; one answer is enough. Default 1. */
  count?: number;
  /** Seconds to wait for an answer. Default 2. */
  waitSeconds?: number;
  /** Seconds between requests when there are several (ping's own default is 1). */
  intervalSeconds?: number;
  /** Interface to send from (ping -I): the route lookup is bound to it, and so is the source address. */
  from?: string;
}

/**
 * Whether `to` answers an ICMP echo sent from inside the namespace named `netns`. ping exits 1 when no
 * answer came and 2 when the echo could not even be sent (no route, an unreachable answer): both are
 * "does not reach". Anything else — `ip` failing to enter the namespace or to start ping (255), a
 * signal — is a broken test set-up, not a verdict on the network, and rejects with what was printed.
 */
export async function pings(netns: string, to: string, opts: PingOptions = {}): Promise<boolean> {
  requireProgram('ping');
  const args = ['netns', 'exec', netns, 'ping', '-q', '-c', String(opts.count ?? 1)];
  args.push('-W', String(opts.waitSeconds ?? 2));
  if (opts.intervalSeconds !== undefined) args.push('-i', String(opts.intervalSeconds));
  if (opts.from !== undefined) args.push('-I', opts.from);
  return new Promise((resolve, reject) =>
    execFile('ip', [...args, to], (err, _stdout, stderr) => {
      if (err === null) return resolve(true);
      if (err.code === 1 || err.code === 2) return resolve(false);
      reject(
        new Error(
          `ip ${args.join(' ')} ${to} failed (${err.code ?? err.signal}): ${stderr.trim() || err.message}`,
        ),
      );
    }),
  );
}
