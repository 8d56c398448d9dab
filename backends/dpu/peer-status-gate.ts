import type { PeerState, PeerStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { monotonicMs } from '../../lib/monotonic-clock';
import { TokenBucket } from './rate-limiter';

// How fast an agent's PeerStatus messages reach the backend. Each one the backend takes is a walk of
// its entries (a whole one lists every peer: some 300 KB at 5,000), so an agent sending them without
// pause would take most of the daemon's CPU and slow every Attach (docs/benchmarks.md). An agent sends
// one after a change and one per heartbeat interval; the gate passes them on at a few per interval. One
// over the rate is held and folded into what is held already, the way the book would apply it (a whole
// one replaces it, a delta drops its `gone` and sets its `peers`), and the fold is passed on as one
// message once the rate allows: nothing the agent said is lost, only coalesced. A sustained flood,
// or more held than a whole message can carry, ends the stream, as a heartbeat flood does.

export interface PeerStatusGateOptions {
  /** PeerStatus messages passed on per heartbeat interval, after a burst. */
  perInterval: number;
  burst: number;
  /** Messages held back within one window of this many intervals that end the stream. */
  floodLimit: number;
  floodWindowIntervals: number;
  /**
   * Most a held fold may weigh (estimated: 96 bytes per entry plus two per character), about what a
   * whole message at the 4 MiB limit decodes to; beyond it the stream ends.
   */
  maxHeldBytes: number;
}

export const PEER_STATUS_GATE_DEFAULTS: PeerStatusGateOptions = {
  perInterval: 10,
  burst: 20,
  floodLimit: 200,
  floodWindowIntervals: 10,
  maxHeldBytes: 16 * 1024 * 1024,
};

/** A PeerStatus held back: a whole table (then `gone` is unused) or a delta, by name. */
interface Held {
  whole: boolean;
  peers: Map<string, PeerState>;
  gone: Set<string>;
  bytes: number;
}

export class PeerStatusGate {
  private readonly bucket: TokenBucket;
  private held: Held | undefined;
  private heldCount = 0;
  private floodStart: number;
  private floodHeld = 0;
  private floodValue: string | undefined;

  constructor(
    private readonly intervalMs: number,
    private readonly opts: PeerStatusGateOptions = PEER_STATUS_GATE_DEFAULTS,
    private readonly now: () => number = monotonicMs,
  ) {
    this.bucket = new TokenBucket(opts.burst, opts.perInterval / intervalMs, now);
    this.floodStart = now();
  }

  /** Why the stream should end (a flood, or too much held); undefined while all is well. */
  get flood(): string | undefined {
    return this.floodValue;
  }

  /** Messages held back (folded into another) since the last call; for one log line per many. */
  takeHeld(): number {
    const n = this.heldCount;
    this.heldCount = 0;
    return n;
  }

  /** The PeerStatus to pass on now, or undefined when it was held (or the stream should end). */
  offer(ps: PeerStatus): PeerStatus | undefined {
    if (this.floodValue) return undefined;
    if (!this.held && this.bucket.take()) return ps;
    this.fold(ps);
    this.countHeld();
    return this.floodValue ? undefined : this.due();
  }

  /** What is held, folded into one message, once the rate allows it. */
  due(): PeerStatus | undefined {
    const held = this.held;
    if (!held || this.floodValue || !this.bucket.take()) return undefined;
    this.held = undefined;
    return { peers: [...held.peers.values()], delta: !held.whole, gone: held.whole ? [] : [...held.gone] };
  }

  private fold(ps: PeerStatus): void {
    let held = this.held;
    if (!held || !ps.delta) {
      held = { whole: !ps.delta, peers: new Map(), gone: new Set(), bytes: 0 };
      this.held = held;
    }
    for (const name of ps.gone) {
      const was = held.peers.get(name);
      if (was) {
        held.peers.delete(name);
        held.bytes -= weight(was);
      }
      if (!held.whole && !held.gone.has(name)) {
        held.gone.add(name);
        held.bytes += 96 + 2 * name.length;
      }
    }
    for (const p of ps.peers) {
      const was = held.peers.get(p.name);
      if (was) held.bytes -= weight(was);
      held.peers.set(p.name, p);
      held.bytes += weight(p);
    }
    if (held.bytes > this.opts.maxHeldBytes) {
      this.held = undefined;
      this.floodValue = `PeerStatus messages held back over the rate came to more than ${this.opts.maxHeldBytes} bytes, more than one message can carry`;
    }
  }

  private countHeld(): void {
    this.heldCount++;
    const t = this.now();
    const window = this.opts.floodWindowIntervals * this.intervalMs;
    if (t - this.floodStart > window) {
      this.floodStart = t;
      this.floodHeld = 0;
    }
    this.floodHeld++;
    if (this.floodHeld >= this.opts.floodLimit && !this.floodValue) {
      this.held = undefined;
      this.floodValue = `PeerStatus flood: ${this.floodHeld} messages over the limit of ${this.opts.perInterval} per ${this.intervalMs} ms`;
    }
  }
}

function weight(p: PeerState): number {
  return 96 + 2 * (p.name.length + p.lastError.length);
}
