import type * as net from 'node:net';
import { monotonicMs } from '../../lib/monotonic-clock';

// A cap on the connections one endpoint holds. At the cap a newcomer is not simply refused: that would
// let a client that opens connections and sits on them lock everyone else out (Status and health
// included) for as long as it likes. Instead the endpoint names which of its connections may be closed
// to make room (one that has not said anything for a while, or has not finished sending its request),
// and the cap closes the one that has waited longest; only when none may go is the newcomer refused.

export interface CapVictimPolicy {
  /** Whether this connection may be closed to make room. */
  evictable(socket: net.Socket, silentForMs: number): boolean;
}

export type Admission = 'admitted' | 'evicted-another' | 'refused';

interface Tracked {
  admittedAt: number;
  bytes: number;
  lastActiveAt: number;
}

export class ConnectionCap {
  private readonly open = new Map<net.Socket, Tracked>();
  private sampler?: NodeJS.Timeout;

  constructor(
    readonly limit: number,
    private readonly policy: CapVictimPolicy,
    private readonly now: () => number = monotonicMs,
  ) {}

  get size(): number {
    return this.open.size;
  }

  /** Admits `socket`, closing another connection or the newcomer itself when at the cap. */
  admit(socket: net.Socket): Admission {
    let outcome: Admission = 'admitted';
    if (this.open.size >= this.limit) {
      const victim = this.victim();
      if (!victim) {
        socket.destroy();
        return 'refused';
      }
      this.open.delete(victim);
      victim.destroy();
      outcome = 'evicted-another';
    }
    const t = this.now();
    this.open.set(socket, { admittedAt: t, bytes: 0, lastActiveAt: t });
    socket.once('close', () => this.open.delete(socket));
    // Activity is sampled while the endpoint is at least half full: silence is measured from the last
    // sample that saw bytes move, which is only needed when a victim may have to be chosen.
    if (!this.sampler && this.open.size >= this.limit / 2) {
      this.sampler = setInterval(() => this.sample(), 500);
      this.sampler.unref();
    } else if (this.sampler && this.open.size < this.limit / 4) {
      clearInterval(this.sampler);
      this.sampler = undefined;
    }
    return outcome;
  }

  /** Closes the connections `which` picks (the idle ones, when shutting down). */
  closeWhere(which: (socket: net.Socket) => boolean): void {
    for (const s of [...this.open.keys()]) if (which(s)) s.destroy();
  }

  /** Closes every connection (the end of a graceful shutdown). */
  destroyAll(): void {
    for (const s of [...this.open.keys()]) s.destroy();
    this.open.clear();
    clearInterval(this.sampler);
    this.sampler = undefined;
  }

  private sample(): void {
    const t = this.now();
    for (const [s, tr] of this.open) {
      const bytes = s.bytesRead + s.bytesWritten;
      if (bytes !== tr.bytes) {
        tr.bytes = bytes;
        tr.lastActiveAt = t;
      }
    }
  }

  /** The evictable connection that has been quiet longest (ties: admitted first). */
  private victim(): net.Socket | undefined {
    this.sample();
    const t = this.now();
    let best: [net.Socket, Tracked] | undefined;
    for (const entry of this.open) {
      const [s, tr] = entry;
      if (!this.policy.evictable(s, t - tr.lastActiveAt)) continue;
      if (
        !best ||
        tr.lastActiveAt < best[1].lastActiveAt ||
        (tr.lastActiveAt === best[1].lastActiveAt && tr.admittedAt < best[1].admittedAt)
      )
        best = entry;
    }
    return best?.[0];
  }
}
