import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { peersFileEntry, writePeersFile, type PeersFileEntry } from '../support/fabric-topology';

// The soak's fabric: a static peers file of a few hundred synthetic peers (nodes that exist only in the
// file: distinct underlay addresses, one /26 each; nothing answers there, the daemon programs them all
// the same), churned while the soak runs: every few seconds one peer leaves the file or one comes back,
// so that the daemon's peer table, its withdrawal grace, the Linux node's VXLAN routes and the DPU
// agent's fabric objects all churn with it. And the figures that say whether any of that leaks.

const execFileP = promisify(execFile);

/**
 * Synthetic peer of slot `i`, the `generation`-th node to hold it: underlay 10.251.x.y, prefix the i-th
 * /26 of 10.128.0.0/10.
 */
function syntheticPeer(i: number, generation: number): PeersFileEntry {
  const p = 0x0a800000 + i * 64;
  const prefix = [p >>> 24, (p >>> 16) & 255, (p >>> 8) & 255, p & 255].join('.');
  const underlay = `10.251.${Math.floor(i / 250)}.${(i % 250) + 1}`;
  return peersFileEntry(`soak-peer-${i}-${generation}`, underlay, [`${prefix}/26`]);
}

/**
 * `count` peers in the file at the start, in `count + count / 5` slots (an underlay address and a
 * prefix each); each churn() takes a random present one out when `count` are present, else puts a new
 * node into a random free slot, so the file holds `count` or `count - 1`. A node that comes in has a
 * name never seen before, as a replaced node of a real cluster has: what the daemon keeps by peer name
 * and does not let go of grows with the churn instead of being reused. A slot is given again only once
 * its last node is out of the withdrawal grace (`reuseAfterMs`), so two nodes never claim one prefix.
 */
export class SoakPeers {
  private readonly slots: Array<{ entry: PeersFileEntry; generation: number; leftAt: number }>;
  private readonly present = new Set<number>();
  added = 0;
  removed = 0;

  constructor(
    private readonly file: string,
    private readonly count: number,
    private readonly reuseAfterMs: number,
  ) {
    this.slots = Array.from({ length: count + Math.ceil(count / 5) }, (_, i) => ({
      entry: syntheticPeer(i, 0),
      generation: 0,
      leftAt: 0,
    }));
    for (let i = 0; i < count; i++) this.present.add(i);
    this.write();
  }

  get size(): number {
    return this.present.size;
  }

  churn(): void {
    const pick = (from: number[]): number => from[Math.floor(Math.random() * from.length)] ?? 0;
    const now = Date.now();
    if (this.present.size >= this.count) {
      const i = pick([...this.present]);
      this.present.delete(i);
      const slot = this.slots[i];
      if (slot) slot.leftAt = now;
      this.removed++;
    } else {
      const free = this.slots.flatMap((s, i) =>
        !this.present.has(i) && now - s.leftAt > this.reuseAfterMs ? [i] : [],
      );
      const i = pick(free);
      const slot = this.slots[i];
      if (free.length === 0 || !slot) return;
      slot.generation++;
      slot.entry = syntheticPeer(i, slot.generation);
      this.present.add(i);
      this.added++;
    }
    this.write();
  }

  private write(): void {
    writePeersFile(
      this.file,
      [...this.present].sort((a, b) => a - b).flatMap((i) => this.slots[i]?.entry ?? []),
    );
  }
}

/** What the fabric holds at a sample, and what of it nothing accounts for. */
export interface SoakFabricFigures {
  /** Peers in the daemon's table (those in their withdrawal grace included). */
  peers: number;
  /** Of them, those only the withdrawal grace keeps. */
  peersInGrace: number;
  /** Routes of ours (protocol 119) in the Linux node's namespace. */
  kernelRoutes: number;
  /** Fabric objects the DPU agent's state file lists, and what the daemon wants it to hold. */
  simObjects: number;
  desiredObjects: number;
  /** Beyond what the table accounts for (0 when nothing leaked). */
  leaks: { kernelRoutes: number; simObjects: number; peers: number };
}

/** The parts of the daemon's Status these figures read. */
export interface FabricStatusView {
  fabric?: {
    peers: Array<{ prefixes: string[]; path: string; withdrawnAt: string }>;
  };
  dpus: Array<{ fabric?: { objectsDesired: number; objectsAcked: number } }>;
}

export async function kernelFabricRoutes(netns: string): Promise<number> {
  const { stdout } = await execFileP('ip', ['-n', netns, 'route', 'show', 'proto', '119']);
  return stdout.split('\n').filter((l) => l.trim() !== '').length;
}

/**
 * The figures, with what each should be: one kernel route per prefix of a peer the table reaches, the
 * agent holding exactly what the daemon wants (and has acknowledged), and the table holding the file's
 * peers plus those in their grace.
 */
export function fabricFigures(
  status: FabricStatusView,
  kernelRoutes: number,
  simObjects: number,
  inFile: number,
): SoakFabricFigures & { acked: boolean } {
  const peers = status.fabric?.peers ?? [];
  const inGrace = peers.filter((p) => p.withdrawnAt !== '').length;
  const routed = peers
    .filter((p) => p.path === 'vxlan' || p.path === 'direct')
    .reduce((s, p) => s + p.prefixes.length, 0);
  const dpu = status.dpus.map((d) => d.fabric).filter((f) => f !== undefined);
  const desired = dpu.reduce((s, f) => s + f.objectsDesired, 0);
  return {
    peers: peers.length,
    peersInGrace: inGrace,
    kernelRoutes,
    simObjects,
    desiredObjects: desired,
    leaks: {
      kernelRoutes: kernelRoutes - routed,
      simObjects: simObjects - desired,
      peers: peers.length - inGrace - inFile,
    },
    acked: dpu.every((f) => f.objectsAcked === f.objectsDesired),
  };
}
