import type { PeerState, PeerStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What the simulator sends as PeerStatus to a daemon that takes deltas ("peer-status-delta"): the
// first of a session whole, then only the peers whose state changed since the last one sent, and the
// names no longer reported. One peer change at 5,000 peers is then a message of one entry instead of
// some 300 KB for both sides to encode, decode and walk after every change.

/** A state's content, to tell whether it moved since the last PeerStatus sent. */
const contentOf = (p: PeerState): string =>
  `${p.reachable ? 1 : 0}|${p.offloaded ? 1 : 0}|${p.txPackets}|${p.rxPackets}|${p.lastError}`;

export class PeerStatusDeltas {
  /** What the daemon holds (by name, each state's content) once the last PeerStatus sent arrives. */
  private sent: Map<string, string> | undefined;

  /** A new session: the next PeerStatus is whole. */
  reset(): void {
    this.sent = undefined;
  }

  /**
   * The PeerStatus that brings the daemon to `peers`: whole when `deltas` is false or nothing was sent
   * this session, else a delta (empty when nothing changed; it still says the agent is reporting).
   */
  next(peers: PeerState[], deltas: boolean): PeerStatus {
    const now = new Map<string, string>();
    for (const p of peers) now.set(p.name, contentOf(p));
    const sent = this.sent;
    this.sent = now;
    if (!deltas || !sent) return { peers, delta: false, gone: [] };
    const changed = peers.filter((p) => sent.get(p.name) !== now.get(p.name));
    const gone = [...sent.keys()].filter((name) => !now.has(name));
    return { peers: changed, delta: true, gone };
  }
}
