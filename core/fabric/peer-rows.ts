import type { ClaimKind, FabricReport, PeerPath, PeerProbe } from '../fabric-dataplane';
import type { FabricPeerStatus } from '../fabric-status';
import type { Peer } from '../peer-source';
import { samePeer } from './peer-shape';
import type { Withdrawal } from './withdrawal-grace';

// The peers as Status shows them: one row per peer of the table last applied, with how the dataplanes
// reach it and since when that last changed. A row is made again only when what it shows changed (its
// record, its path, its withdrawal), so an apply for one peer's change makes that peer's row, not a
// row per peer with its record turned into text to find whether it changed.
//
// What moves between applies (the data-path probes, the DPUs' PeerStatus) is put on the rows when
// Status asks (view()), not kept in them.

interface Kept {
  peer: Peer;
  path: PeerPath | undefined;
  withdrawnSince: number | undefined;
  /** The prefixes it lost and keeps for the grace, as text ('' when none). */
  keptText: string;
  /** When its record, path or reason last changed (wall clock). */
  since: number;
  row: FabricPeerStatus;
  /** The last update that listed it. */
  seen: number;
}

export interface PeerRowsOptions {
  /** The withdrawal grace (ms), named in a withdrawing peer's reason. */
  graceMs: number;
  /** The withdrawal grace's clock (monotonic ms). */
  now: () => number;
}

export class PeerRows {
  private readonly kept = new Map<string, Kept>();
  private list: FabricPeerStatus[] = [];
  private paths = new Map<string, number>();
  private refused = new Map<ClaimKind, number>();
  private updates = 0;

  constructor(private readonly opts: PeerRowsOptions) {}

  /** The rows for a table just applied, and what the dataplanes reported for it. */
  update(
    table: readonly Peer[],
    reports: readonly FabricReport[],
    pending: ReadonlyMap<string, Withdrawal>,
    kept: (node: string) => ReadonlyMap<string, number> | undefined = () => undefined,
  ): readonly FabricPeerStatus[] {
    const wall = Date.now();
    const stamp = ++this.updates;
    const pathOf = pathFinder(reports);
    const rows: FabricPeerStatus[] = [];
    const counts = new Map<string, number>();
    const refused = new Map<ClaimKind, number>();
    for (const peer of table) {
      const path = pathOf(peer.node);
      for (const r of path?.refused ?? []) refused.set(r.claim, (refused.get(r.claim) ?? 0) + 1);
      const withdrawnSince = pending.get(peer.node)?.since;
      const lost = kept(peer.node);
      const keptText = lost ? [...lost.keys()].join(', ') : '';
      const prev = this.kept.get(peer.node);
      let k: Kept;
      if (
        prev &&
        samePeer(prev.peer, peer) &&
        sameShown(prev.path, path) &&
        prev.withdrawnSince === withdrawnSince &&
        prev.keptText === keptText
      )
        k = prev;
      else {
        const moved = !prev || !samePeer(prev.peer, peer) || !sameCourse(prev.path, path);
        const since = moved ? wall : prev.since;
        const row = this.row(peer, path, withdrawnSince, since, wall, keptText);
        k = { peer, path, withdrawnSince, keptText, since, row, seen: stamp };
        this.kept.set(peer.node, k);
      }
      k.seen = stamp;
      rows.push(k.row);
      counts.set(k.row.path, (counts.get(k.row.path) ?? 0) + 1);
    }
    if (this.kept.size > rows.length)
      this.kept.forEach((k, name) => {
        if (k.seen !== stamp) this.kept.delete(name);
      });
    this.list = rows;
    this.paths = counts;
    this.refused = refused;
    return rows;
  }

  /** How a peer of the last apply is reached, if it was in it. */
  pathOf(node: string): FabricPeerStatus['path'] | undefined {
    return this.kept.get(node)?.row.path;
  }

  /** Claims refused in the last apply (another peer or this node holds them), by kind. */
  refusedClaims(): ReadonlyMap<ClaimKind, number> {
    return this.refused;
  }

  /** The rows of the last apply. */
  get rows(): readonly FabricPeerStatus[] {
    return this.list;
  }

  /** How many peers of the last apply are reached by each path. */
  count(path: FabricPeerStatus['path']): number {
    return this.paths.get(path) ?? 0;
  }

  /**
   * The rows with what moved since the apply: each peer's probes as of now, and how this node's DPUs
   * see it now (their PeerStatus comes between applies).
   */
  view(reports: readonly FabricReport[], probes: ReadonlyMap<string, PeerProbe>): FabricPeerStatus[] {
    const seen = seenByNode(reports);
    if (probes.size === 0 && seen.size === 0) return [...this.list];
    return this.list.map((r) => {
      const probe = probes.get(r.node);
      const seenBy = seen.get(r.node);
      if (!probe && !seenBy) return r;
      return { ...r, ...(probe ? { probe } : {}), ...(seenBy ? { seenBy } : {}) };
    });
  }

  private row(
    peer: Peer,
    path: PeerPath | undefined,
    withdrawnSince: number | undefined,
    since: number,
    wall: number,
    keptText = '',
  ): FabricPeerStatus {
    const withdrawnAt = withdrawnSince === undefined ? undefined : wall - (this.opts.now() - withdrawnSince);
    const reasons = [
      path ? (path.reason ?? '') : 'not in the last report of the dataplane',
      withdrawnSince !== undefined
        ? `left the peer source; kept for the withdrawal grace (${Math.round(this.opts.graceMs / 1000)} s) unless its data-path probes fail`
        : '',
      keptText !== ''
        ? `prefixes ${keptText} left the peer source; kept for the withdrawal grace (${Math.round(this.opts.graceMs / 1000)} s)`
        : '',
    ].filter((r) => r !== '');
    return {
      node: peer.node,
      underlay: peer.underlay,
      path: path?.path ?? 'unreachable',
      prefixes: path?.prefixes ?? peer.prefixes,
      reason: reasons.join('; '),
      lastChange: new Date(since).toISOString(),
      ...(withdrawnAt === undefined ? {} : { withdrawnAt: new Date(withdrawnAt).toISOString() }),
      ...(peer.endpoints ? { endpoints: peer.endpoints } : {}),
    };
  }
}

/**
 * Each peer's path (the last dataplane's that reports it, as before), asked for in the table's order. A single
 * report listing the peers in that order (the DPU backend's, sorted like the table) is walked along,
 * no map of 5,000 made per apply; anything else is looked up in one.
 */
function pathFinder(reports: readonly FabricReport[]): (node: string) => PeerPath | undefined {
  const only = reports.length === 1 ? (reports[0] as FabricReport).peers : undefined;
  let next = 0;
  let byNode: Map<string, PeerPath> | undefined;
  return (node) => {
    const walked = only?.[next];
    if (walked?.node === node) {
      next++;
      return walked;
    }
    byNode ??= new Map(reports.flatMap((r) => r.peers).map((p) => [p.node, p]));
    return byNode.get(node);
  };
}

/** Every DPU's word on each peer, across the dataplanes' reports. */
function seenByNode(reports: readonly FabricReport[]): Map<string, NonNullable<PeerPath['seenBy']>> {
  const out = new Map<string, NonNullable<PeerPath['seenBy']>>();
  for (const r of reports)
    for (const p of r.peers) {
      if (!p.seenBy || p.seenBy.length === 0) continue;
      const had = out.get(p.node);
      out.set(p.node, had ? [...had, ...p.seenBy] : p.seenBy);
    }
  return out;
}

/** The same way and the same reason: what "last change" tracks. */
function sameCourse(a: PeerPath | undefined, b: PeerPath | undefined): boolean {
  return a?.path === b?.path && a?.reason === b?.reason;
}

/** Everything a row shows of the path. */
function sameShown(a: PeerPath | undefined, b: PeerPath | undefined): boolean {
  if (a === b) return true;
  if (!a || !b || !sameCourse(a, b)) return false;
  if (a.prefixes.length !== b.prefixes.length) return false;
  for (let i = 0; i < a.prefixes.length; i++) if (a.prefixes[i] !== b.prefixes[i]) return false;
  return true;
}
