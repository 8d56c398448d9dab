import { createHash } from 'node:crypto';
import { LinkState, type Inventory, type PhysicalFunction } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// The simulated DPU's VFs: N PFs with M VFs each, handed out one per port and given back when the port
// goes. Names follow the host's convention for VF netdevs ("<pf name>v<index>"), with a tag from the
// agent id in the PF name so that several simulators can share one host namespace.

export interface VfSlot {
  pf: number;
  vf: number;
}

export interface VfIdentity extends VfSlot {
  netdev: string;
  pciAddress: string;
  /** The DPU-side interface that stands for the VF. */
  representor: string;
}

export const SIM_FIRMWARE_VERSION = 'sim-fw-1.0';
export const SIM_AGENT_VERSION = 'workloadnet-dpu-sim-2';

const hex = (n: number, width: number): string => n.toString(16).padStart(width, '0');

export class VfPool {
  /** From the agent id: names its PFs and VFs, and marks its representors (vf-adoption.ts). */
  readonly tag: string;
  /** Port name → its VF. */
  private readonly held = new Map<string, VfSlot>();
  /** Per PF, the VF indexes in use. */
  private readonly used: Array<Set<number>>;
  /** Per PF, no VF below this index is free: allocation scans from here, not from 0. */
  private readonly lowestFree: number[];

  constructor(
    agentId: string,
    readonly pfs: number,
    readonly vfsPerPf: number,
  ) {
    if (pfs < 1 || pfs > 64) throw new Error('--pfs must be 1-64');
    if (vfsPerPf < 1 || vfsPerPf > 4096) throw new Error('--vfs-per-pf must be 1-4096');
    this.tag = createHash('sha256').update(agentId).digest('hex').slice(0, 4);
    this.used = Array.from({ length: pfs }, () => new Set<number>());
    this.lowestFree = new Array<number>(pfs).fill(0);
  }

  get total(): number {
    return this.pfs * this.vfsPerPf;
  }

  get free(): number {
    return this.total - this.held.size;
  }

  pfName(pf: number): string {
    return `s${this.tag}f${pf}`;
  }

  identity(slot: VfSlot): VfIdentity {
    return {
      ...slot,
      netdev: `${this.pfName(slot.pf)}v${slot.vf}`,
      pciAddress: `${hex(1 + Math.floor(slot.vf / 256), 4)}:${hex(0x40 + slot.pf, 2)}:${hex(Math.floor(slot.vf / 8) % 32, 2)}.${slot.vf % 8}`,
      representor: `rp${slot.pf}v${slot.vf}`,
    };
  }

  slotOf(port: string): VfSlot | undefined {
    return this.held.get(port);
  }

  /**
   * The port's VF: the one it holds, else the lowest free one (on `pf` when given). Undefined when
   * none is free there.
   */
  allocate(port: string, pf?: number): VfSlot | undefined {
    const mine = this.held.get(port);
    if (mine && (pf === undefined || mine.pf === pf)) return mine;
    const pfs = pf === undefined ? [...this.used.keys()] : [pf];
    for (const p of pfs) {
      const inUse = this.used[p];
      if (!inUse || inUse.size >= this.vfsPerPf) continue;
      for (let vf = this.lowestFree[p] ?? 0; vf < this.vfsPerPf; vf++) {
        if (inUse.has(vf)) continue;
        if (mine) this.release(port);
        this.lowestFree[p] = vf + 1;
        return this.claim(port, { pf: p, vf });
      }
    }
    return undefined;
  }

  /** Records that `port` holds `slot` (resuming a saved table). */
  claim(port: string, slot: VfSlot): VfSlot {
    this.used[slot.pf]?.add(slot.vf);
    this.held.set(port, slot);
    return slot;
  }

  release(port: string): void {
    const slot = this.held.get(port);
    if (!slot) return;
    this.held.delete(port);
    this.used[slot.pf]?.delete(slot.vf);
    this.lowestFree[slot.pf] = Math.min(this.lowestFree[slot.pf] ?? 0, slot.vf);
  }

  inventory(): Inventory {
    const pfs: PhysicalFunction[] = this.used.map((inUse, pf) => ({
      index: pf,
      name: this.pfName(pf),
      pciAddress: `0000:${hex(0x30 + pf, 2)}:00.0`,
      linkState: LinkState.LINK_STATE_UP,
      speedMbps: 100_000,
      mtu: 9216,
      vfTotal: this.vfsPerPf,
      vfFree: this.vfsPerPf - inUse.size,
      vfs: Array.from({ length: this.vfsPerPf }, (_, vf) => {
        const id = this.identity({ pf, vf });
        return { index: vf, netdev: id.netdev, pciAddress: id.pciAddress };
      }),
    }));
    return { pfs, firmwareVersion: SIM_FIRMWARE_VERSION, agentVersion: SIM_AGENT_VERSION };
  }
}
