// Polling for a state the test cannot be told about (a sweep, a reconnect, a status): one loop, so
// every suite fails the same way, naming what it waited for and for how long.

export interface WaitOptions {
  /** Pause between checks (default 20 ms). */
  intervalMs?: number;
  /**
   * Treat a check that throws as "not yet" and keep polling (for calls that fail while a daemon
   * restarts); the last error is named when the time is up. By default a throw fails at once.
   */
  retryOnError?: boolean;
}

/** Polls `check` until it returns true; fails after `timeoutMs` naming `what`. */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
  opts: WaitOptions = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      if (await check()) return;
    } catch (err) {
      if (!opts.retryOnError) throw err;
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`,
      );
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 20));
  }
}
