import { monotonicMs } from '../../lib/monotonic-clock';
import { TokenBucket } from './rate-limiter';

// Which of an agent's heartbeats count as liveness. A healthy agent sends one per interval; a few more
// are jitter or a reconnect burst, and the excess is dropped for the price of a counter. An agent that
// keeps flooding within one window ends its stream. Its own file beside the port and peer status gates:
// the session asks it one question per heartbeat and acts on the answer, the counting is all here.

/** Heartbeats allowed per interval before the excess is dropped (one is normal). */
export const HEARTBEATS_PER_INTERVAL = 10;

/**
 * Heartbeats every 500 ms, so a stalled DPU is known lost 1.5 s into its silence and its new ports go
 * to another one: at 1 s the detection alone (3 s) would exceed the 2 s in which a node should move on.
 * A heartbeat is a few bytes; the test fixtures run at 200 ms under full load without false losses, and
 * a daemon whose own event loop stalled skips one liveness check instead of blaming the agent.
 */
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 500;
const HEARTBEAT_BURST = 20;
/** Dropped heartbeats within one flood window that end the session. */
const FLOOD_LIMIT = 200;
const FLOOD_WINDOW_INTERVALS = 10;

/**
 * What one heartbeat is: counted as liveness, or dropped (the first drop of its window is said, a
 * flood ends the stream for `flood`).
 */
export type HeartbeatVerdict =
  { counted: true } | { counted: false; firstInWindow: boolean; flood: string | undefined };

export class HeartbeatGate {
  private readonly bucket: TokenBucket;
  private dropped = 0;
  private windowStart = monotonicMs();

  constructor(private readonly intervalMs: number) {
    this.bucket = new TokenBucket(HEARTBEAT_BURST, HEARTBEATS_PER_INTERVAL / intervalMs);
  }

  offer(): HeartbeatVerdict {
    if (this.bucket.take()) return { counted: true };
    const now = monotonicMs();
    if (now - this.windowStart > FLOOD_WINDOW_INTERVALS * this.intervalMs) {
      this.windowStart = now;
      this.dropped = 0;
    }
    this.dropped++;
    const flood =
      this.dropped >= FLOOD_LIMIT
        ? `heartbeat flood: ${this.dropped} heartbeats over the limit of ${HEARTBEATS_PER_INTERVAL} per ${this.intervalMs} ms`
        : undefined;
    return { counted: false, firstInWindow: this.dropped === 1, flood };
  }
}
