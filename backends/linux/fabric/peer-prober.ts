// Probes each peer over the data path every interval and keeps, per peer, whether it answers and how
// fast. The probes of one interval are spread over it (each peer keeps its own phase), so 5,000 peers
// every 5 s are 1,000 small sends a second, never a burst; a tick looks at every peer, which costs
// microseconds per thousand. Nothing here runs on the attach path.
//
// A peer is `reachable` once a probe is answered, `degraded` when, having answered before, it leaves
// LOSSES_TO_DEGRADE probes in a row unanswered, and `unknown` before its first answer: a peer that never
// answered is no evidence of a dead one (it may hold no address to answer on), so it is never called
// degraded; after UNANSWERED_TO_DISPROVE unanswered probes it is still unknown, but listeners are told
// (a peer that never answered keeps nothing through the withdrawal grace). The transport (ICMP in the kernel, a fake in tests) and the clocks are given.

import type { PeerProbe } from '../../../core/fabric-dataplane';
import { UNANSWERED_TO_DISPROVE } from '../../../core/fabric/peer-probes';

export interface ProbeTarget {
  node: string;
  address: string;
  family: 4 | 6;
}

export interface ProbeTransport {
  /** Sends one probe; undefined when it went out, else why not (counted as a loss). */
  send(target: ProbeTarget, seq: number): string | undefined;
  /**
   * Starts delivering answers: `answer(family, seq)` for each; the transport reads only while
   * `waiting()` says probes are unanswered.
   */
  listen(answer: (family: 4 | 6, seq: number) => void, waiting: () => boolean): void;
  /** Called after each send: a transport that reads only while probes wait starts reading. */
  sent?(family: 4 | 6): void;
  close(): Promise<void>;
}

export interface PeerProberOptions {
  intervalMs: number;
  /** How long an answer may take before the probe counts as lost (default: 2 s, within the interval). */
  timeoutMs?: number;
  transport: ProbeTransport;
  /** Monotonic clock (ms) for phases and round trips. */
  now: () => number;
  /** Wall clock (ms) for `since`. */
  wall?: () => number;
  /** How often sends and timeouts are looked at (ms, default 100 or less with a short interval). */
  tickMs?: number;
  onChange?: (node: string, probe: PeerProbe) => void;
}

/** Unanswered probes in a row that make an answering peer degraded. */
export const LOSSES_TO_DEGRADE = 3;
/** Round trips kept per peer for the median. */
const RTT_SAMPLES = 16;

interface PeerState {
  target: ProbeTarget;
  nextAt: number;
  state: PeerProbe['state'];
  answered: boolean;
  lost: number;
  rtts: number[];
  since: number;
  /** The key of the probe in flight, if one is. */
  inFlight?: string;
}

export class PeerProber {
  private readonly peers = new Map<string, PeerState>();
  /** In-flight probes by "<family>|<seq>". */
  private readonly flying = new Map<string, { node: string; sentAt: number }>();
  private seq = 0;
  private timer?: NodeJS.Timeout;
  private readonly timeoutMs: number;
  private readonly wall: () => number;

  constructor(private readonly opts: PeerProberOptions) {
    this.timeoutMs = Math.min(opts.timeoutMs ?? 2000, Math.max(1, Math.floor(opts.intervalMs * 0.8)));
    this.wall = opts.wall ?? Date.now;
    opts.transport.listen(
      (family, seq) => this.answer(family, seq),
      () => this.flying.size > 0,
    );
  }

  /**
   * The peers to probe now. A peer kept with the same target keeps its state and phase; a new one (or
   * one whose target changed) starts unknown, its first probe placed within the next interval so that
   * a whole table arriving at once is spread too.
   */
  setTargets(targets: readonly ProbeTarget[]): void {
    const now = this.opts.now();
    const keep = new Set<string>();
    const fresh = targets.filter((t) => {
      keep.add(t.node);
      const had = this.peers.get(t.node);
      return !had || had.target.address !== t.address || had.target.family !== t.family;
    });
    for (const [node, p] of this.peers)
      if (!keep.has(node)) {
        if (p.inFlight) this.flying.delete(p.inFlight);
        this.peers.delete(node);
      }
    fresh.forEach((t, i) => {
      const had = this.peers.get(t.node);
      if (had?.inFlight) this.flying.delete(had.inFlight);
      this.peers.set(t.node, {
        target: t,
        nextAt: now + Math.floor((i * this.opts.intervalMs) / fresh.length),
        state: 'unknown',
        answered: false,
        lost: 0,
        rtts: [],
        since: this.wall(),
      });
    });
  }

  start(): void {
    if (this.timer) return;
    const tickMs = this.opts.tickMs ?? Math.min(100, Math.max(10, Math.floor(this.opts.intervalMs / 10)));
    this.timer = setInterval(() => this.tick(), tickMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    this.flying.clear();
    await this.opts.transport.close();
  }

  /** Counts the probes that timed out as lost, and sends those that are due. */
  tick(): void {
    const now = this.opts.now();
    for (const [key, f] of this.flying) {
      if (now - f.sentAt < this.timeoutMs) continue;
      this.flying.delete(key);
      const p = this.peers.get(f.node);
      if (p?.inFlight === key) {
        p.inFlight = undefined;
        this.lose(f.node, p);
      }
    }
    for (const [node, p] of this.peers) {
      if (p.nextAt > now) continue;
      // Keeps the phase; a daemon that was held up does not send the missed rounds at once.
      p.nextAt = Math.max(p.nextAt + this.opts.intervalMs, now + 1);
      if (p.inFlight) continue;
      const seq = this.seq;
      this.seq = (this.seq + 1) & 0xffff;
      const why = this.opts.transport.send(p.target, seq);
      if (why !== undefined) {
        this.lose(node, p);
        continue;
      }
      const key = `${p.target.family}|${seq}`;
      this.flying.set(key, { node, sentAt: now });
      p.inFlight = key;
      this.opts.transport.sent?.(p.target.family);
    }
  }

  /** An answer to probe `seq`: the peer is reachable, with this round trip. */
  answer(family: 4 | 6, seq: number): void {
    const key = `${family}|${seq}`;
    const f = this.flying.get(key);
    if (!f) return;
    this.flying.delete(key);
    const p = this.peers.get(f.node);
    if (!p || p.inFlight !== key) return;
    p.inFlight = undefined;
    p.rtts.push(Math.max(0, this.opts.now() - f.sentAt));
    if (p.rtts.length > RTT_SAMPLES) p.rtts.shift();
    p.lost = 0;
    p.answered = true;
    this.set(f.node, p, 'reachable');
  }

  /** Every probed peer's state as of now. */
  health(): ReadonlyMap<string, PeerProbe> {
    const out = new Map<string, PeerProbe>();
    for (const [node, p] of this.peers) out.set(node, view(p));
    return out;
  }

  /** Probes in flight now. */
  get inFlight(): number {
    return this.flying.size;
  }

  private lose(node: string, p: PeerState): void {
    p.lost++;
    if (p.answered && p.lost >= LOSSES_TO_DEGRADE) this.set(node, p, 'degraded');
    // Still unknown, but now a peer that never proved itself: the controller may withdraw it sooner.
    else if (!p.answered && p.lost === UNANSWERED_TO_DISPROVE) this.opts.onChange?.(node, view(p));
  }

  private set(node: string, p: PeerState, state: PeerProbe['state']): void {
    if (p.state === state) return;
    p.state = state;
    p.since = this.wall();
    this.opts.onChange?.(node, view(p));
  }
}

function view(p: PeerState): PeerProbe {
  const out: PeerProbe = {
    state: p.state,
    target: p.target.address,
    lost: p.lost,
    answered: p.answered,
    since: new Date(p.since).toISOString(),
  };
  const last = p.rtts[p.rtts.length - 1];
  if (last !== undefined) {
    out.rttMs = last;
    const sorted = [...p.rtts].sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    out.medianRttMs =
      sorted.length % 2 ? (sorted[mid] ?? last) : ((sorted[mid - 1] ?? last) + (sorted[mid] ?? last)) / 2;
  }
  return out;
}
