import type {
  FabricDataplane,
  FabricReport,
  FabricSettings,
  LocalNode,
  PeerSeenBy,
} from '../../core/fabric-dataplane';
import type { NodeRecord, Peer, PeerSource, PeerSourceStatus } from '../../core/peer-source';

// Stand-ins for the fabric's two seams: a dataplane that records what it is asked to program (the
// kernel one is tested with real namespaces in test/backends/linux), and a peer source the test moves
// by hand.

export class RecordingFabricDataplane implements FabricDataplane {
  readonly prepared: FabricSettings[] = [];
  /** Every table apply() was given, node names in order. */
  readonly applied: string[][] = [];
  readonly tables: Peer[][] = [];
  stopped = 0;
  /** Set to make prepare() (or apply()) fail with it. */
  prepareError?: Error;
  applyError?: Error;
  repairs = 0;
  /** What report() says of a source filter: its counter, and warnings. */
  filteredPackets?: number;
  warnings?: string[];
  /** What report() says the node's DPUs see of each peer now (their PeerStatus, between applies). */
  seen?: Map<string, PeerSeenBy[]>;
  local: LocalNode = {
    underlay: ['192.0.2.1'],
    uplink: 'eth0',
    mtu: 1500,
    subnets: ['192.0.2.0/24'],
    vtep: { mac: '0e:77:c0:00:02:01', vni: 30574, port: 4789 },
  };
  private last: FabricReport = emptyReport();

  async prepare(settings: FabricSettings): Promise<LocalNode> {
    this.prepared.push(settings);
    if (this.prepareError) throw this.prepareError;
    return this.local;
  }

  async apply(peers: readonly Peer[]): Promise<FabricReport> {
    if (this.applyError) throw this.applyError;
    this.applied.push(peers.map((p) => p.node));
    this.tables.push([...peers]);
    this.last = {
      ready: true,
      reasons: [],
      peers: peers.map((p) =>
        p.vtep
          ? { node: p.node, path: 'vxlan', prefixes: p.prefixes }
          : { node: p.node, path: 'unreachable', reason: 'the peer has no VTEP', prefixes: p.prefixes },
      ),
      objects: {
        routes: peers.reduce((n, p) => n + p.prefixes.length, 0),
        neighbours: peers.length,
        fdb: peers.length,
      },
      repairs: this.repairs,
    };
    return this.last;
  }

  report(): FabricReport {
    const seen = this.seen;
    const out: FabricReport = {
      ...this.last,
      repairs: this.repairs,
      ...(seen
        ? { peers: this.last.peers.map((p) => (seen.has(p.node) ? { ...p, seenBy: seen.get(p.node) } : p)) }
        : {}),
    };
    if (this.filteredPackets !== undefined) out.filteredPackets = this.filteredPackets;
    if (this.warnings) out.warnings = this.warnings;
    return out;
  }

  async stop(): Promise<void> {
    this.stopped++;
  }
}

function emptyReport(): FabricReport {
  return { ready: false, reasons: [], peers: [], objects: { routes: 0, neighbours: 0, fdb: 0 }, repairs: 0 };
}

export class ManualPeerSource implements PeerSource {
  readonly kind = 'manual';
  synced = false;
  table = new Map<string, Peer>();
  started?: NodeRecord;
  stops = 0;
  /** Resolved by start(); a test may hold it open to play a source that cannot reach its store. */
  startGate: Promise<void> = Promise.resolve();
  private readonly listeners: Array<() => void> = [];

  async start(self: NodeRecord): Promise<void> {
    this.started = self;
    await this.startGate;
  }

  async stop(): Promise<void> {
    this.stops++;
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.table;
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  status(): PeerSourceStatus {
    return {
      kind: this.kind,
      ready: this.synced,
      connected: this.synced,
      reasons: this.synced ? [] : ['manual source not listed yet'],
      rejected: [],
    };
  }

  /** Replaces the table (and, by default, marks it a full list), then tells the listeners. */
  set(peers: Peer[], synced = true): void {
    this.table = new Map(peers.map((p) => [p.node, p]));
    this.synced = synced;
    for (const l of this.listeners) l();
  }
}

export function peer(node: string, octet: number, prefixes = [`10.244.${octet}.0/24`]): Peer {
  return {
    node,
    underlay: [`192.0.2.${octet}`],
    mtu: 1500,
    vtep: { mac: `0e:77:c0:00:02:${octet.toString(16).padStart(2, '0')}`, vni: 30574, port: 4789 },
    bootId: `boot-${node}`,
    prefixes,
  };
}

/** Resolves once `cond` holds, checking every 10 ms; fails after `ms`. */
export async function until(cond: () => boolean, ms = 10_000, what = 'condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
