import { LinkState, type Inventory } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What an agent says its DPU has (protocol version 2): its PFs with their link, VF pool and the VF
// netdevs it may name as endpoints. Checked whole when it arrives; the backend guards endpoints with it
// (a netdev the inventory does not list is never moved into a workload) and sizes placement by it.

export interface InventoryVf {
  pf: number;
  vf: number;
  pciAddress: string;
}

export interface InventoryPf {
  index: number;
  name: string;
  pciAddress: string;
  linkState: 'up' | 'down' | 'unknown';
  speedMbps: number;
  mtu: number;
  vfTotal: number;
  vfFree: number;
}

const MAX_PFS = 64;
const MAX_VFS = 8192;
const NETDEV = /^[^\s/:]{1,15}$/;
const PCI = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/i;

export class AgentInventory {
  private constructor(
    readonly pfs: readonly InventoryPf[],
    readonly firmwareVersion: string,
    readonly agentVersion: string,
    private readonly vfs: ReadonlyMap<string, InventoryVf>,
  ) {}

  /** The inventory, or why it is refused (the previous one then stays). */
  static parse(inv: Inventory): AgentInventory | string {
    if (inv.pfs.length > MAX_PFS) return `inventory lists ${inv.pfs.length} PFs, more than ${MAX_PFS}`;
    const pfs: InventoryPf[] = [];
    const vfs = new Map<string, InventoryVf>();
    const indexes = new Set<number>();
    for (const pf of inv.pfs) {
      const where = `inventory PF ${pf.index}`;
      if (indexes.has(pf.index)) return `${where} is listed twice`;
      indexes.add(pf.index);
      if (!NETDEV.test(pf.name))
        return `${where} has no valid netdev name (${JSON.stringify(pf.name.slice(0, 32))})`;
      if (pf.pciAddress && !PCI.test(pf.pciAddress))
        return `${where} has a malformed PCI address ${JSON.stringify(pf.pciAddress.slice(0, 32))}`;
      if (pf.vfFree > pf.vfTotal) return `${where} has more free VFs (${pf.vfFree}) than VFs (${pf.vfTotal})`;
      if (pf.vfs.length > pf.vfTotal) return `${where} lists ${pf.vfs.length} VFs but has ${pf.vfTotal}`;
      if (vfs.size + pf.vfs.length > MAX_VFS) return `inventory lists more than ${MAX_VFS} VFs`;
      for (const vf of pf.vfs) {
        if (!NETDEV.test(vf.netdev))
          return `${where} VF ${vf.index} has no valid netdev name (${JSON.stringify(vf.netdev.slice(0, 32))})`;
        if (vf.pciAddress && !PCI.test(vf.pciAddress))
          return `${where} VF ${vf.index} has a malformed PCI address`;
        if (vfs.has(vf.netdev)) return `inventory lists VF netdev ${vf.netdev} twice`;
        vfs.set(vf.netdev, { pf: pf.index, vf: vf.index, pciAddress: vf.pciAddress });
      }
      pfs.push({
        index: pf.index,
        name: pf.name,
        pciAddress: pf.pciAddress,
        linkState:
          pf.linkState === LinkState.LINK_STATE_UP
            ? 'up'
            : pf.linkState === LinkState.LINK_STATE_DOWN
              ? 'down'
              : 'unknown',
        speedMbps: pf.speedMbps,
        mtu: pf.mtu,
        vfTotal: pf.vfTotal,
        vfFree: pf.vfFree,
      });
    }
    const text = (v: string): string => v.slice(0, 128);
    return new AgentInventory(
      pfs.sort((a, b) => a.index - b.index),
      text(inv.firmwareVersion),
      text(inv.agentVersion),
      vfs,
    );
  }

  /** The VF a netdev name is, when this inventory lists it. */
  vf(netdev: string): InventoryVf | undefined {
    return this.vfs.get(netdev);
  }

  get vfTotal(): number {
    return this.pfs.reduce((n, pf) => n + pf.vfTotal, 0);
  }

  get vfFree(): number {
    return this.pfs.reduce((n, pf) => n + pf.vfFree, 0);
  }

  hasPf(index: number): boolean {
    return this.pfs.some((pf) => pf.index === index);
  }
}
