import type { PortStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { monotonicMs } from '../../lib/monotonic-clock';
import { TokenBucket } from './rate-limiter';

// What of an agent's PortStatus stream reaches the backend (and its log). An agent repeating a port's
// state, flapping it, or stuffing its message field would turn each message into a log line and fill
// the disk (docs/benchmarks.md). The gate passes a port's status on only when it differs from the last
// one passed, at most a few per second per port and a bounded number per second in all, with the
// agent's text cut short. A status held back by the rate is not lost: the latest one per port is
// passed on once the port's rate allows, so the backend still ends up with the port's current state.

/** Longest agent-supplied message passed on (the rest is replaced by a note of its length). */
export const PORT_STATUS_MESSAGE_MAX = 256;

export interface PortStatusGateOptions {
  /** Status changes passed on per port per second, after a burst. */
  perPortPerSecond: number;
  perPortBurst: number;
  /** Status changes passed on per second for all ports together (an agent inventing port names). */
  totalPerSecond: number;
  totalBurst: number;
  /** Ports remembered for deduplication; the least recently heard are forgotten first. */
  maxPorts: number;
}

export const PORT_STATUS_GATE_DEFAULTS: PortStatusGateOptions = {
  perPortPerSecond: 2,
  perPortBurst: 5,
  totalPerSecond: 200,
  totalBurst: 400,
  maxPorts: 8192,
};

interface PortEntry {
  bucket: TokenBucket;
  /** State and text of the last status passed on. */
  last?: string;
  /** The newest status held back by the rate, passed on by due(). */
  pending?: PortStatus;
}

export interface GateCounts {
  duplicates: number;
  limited: number;
}

export class PortStatusGate {
  private readonly ports = new Map<string, PortEntry>();
  private readonly total: TokenBucket;
  private counts: GateCounts = { duplicates: 0, limited: 0 };

  constructor(
    private readonly opts: PortStatusGateOptions = PORT_STATUS_GATE_DEFAULTS,
    private readonly now: () => number = monotonicMs,
  ) {
    this.total = new TokenBucket(opts.totalBurst, opts.totalPerSecond / 1000, now);
  }

  /** The status to pass on now (its text cut short), or undefined when it is a repeat or over the rate. */
  offer(ps: PortStatus): PortStatus | undefined {
    const entry = this.entry(ps.name);
    const trimmed = trimmedStatus(ps);
    const signature = `${trimmed.operState}\u0000${trimmed.message}`;
    if (entry.last === signature) {
      entry.pending = undefined;
      this.counts.duplicates++;
      return undefined;
    }
    if (!entry.bucket.take() || !this.total.take()) {
      entry.pending = trimmed;
      this.counts.limited++;
      return undefined;
    }
    entry.pending = undefined;
    entry.last = signature;
    return trimmed;
  }

  /** Held-back statuses whose port may pass one on again now (the newest per port). */
  due(): PortStatus[] {
    const out: PortStatus[] = [];
    for (const entry of this.ports.values()) {
      const ps = entry.pending;
      if (!ps) continue;
      if (!entry.bucket.take() || !this.total.take()) continue;
      entry.pending = undefined;
      entry.last = `${ps.operState}\u0000${ps.message}`;
      out.push(ps);
    }
    return out;
  }

  /** Statuses dropped since the last call (for one summary log line instead of one per message). */
  takeCounts(): GateCounts {
    const c = this.counts;
    this.counts = { duplicates: 0, limited: 0 };
    return c;
  }

  private entry(name: string): PortEntry {
    let entry = this.ports.get(name);
    if (entry) {
      // Map order is insertion order: re-inserting keeps the least recently heard port first.
      this.ports.delete(name);
    } else {
      entry = {
        bucket: new TokenBucket(this.opts.perPortBurst, this.opts.perPortPerSecond / 1000, this.now),
      };
      if (this.ports.size >= this.opts.maxPorts) {
        const oldest = this.ports.keys().next().value;
        if (oldest !== undefined) this.ports.delete(oldest);
      }
    }
    this.ports.set(name, entry);
    return entry;
  }
}

/** The status with the agent's message cut to PORT_STATUS_MESSAGE_MAX characters. */
export function trimmedStatus(ps: PortStatus): PortStatus {
  if (ps.message.length <= PORT_STATUS_MESSAGE_MAX) return ps;
  const cut = ps.message.length - PORT_STATUS_MESSAGE_MAX;
  return { ...ps, message: `${ps.message.slice(0, PORT_STATUS_MESSAGE_MAX)}… (${cut} more characters)` };
}
