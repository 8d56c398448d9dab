import type { PeerState } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricChange, FabricDataplane, FabricOutcome, Uplink } from './dataplane';
import type { FabricTable } from './fabric-table';
import { dependentsOf, wantsOf } from './vxlan-programming';

// The fabric of the control-plane-only simulator (--dataplane none): it holds and checks the objects as
// the netns dataplane would (a peer whose VNI differs from the VTEP's is refused alike), and programs
// nothing. Its uplink is only the address it is told (--vtep-address): with none it carries no fabric.

export class RecordedFabric implements FabricDataplane {
  private readonly blocked = new Map<string, string>();

  constructor(private readonly vtepAddress: string) {}

  async uplink(): Promise<Uplink> {
    return { addresses: [this.vtepAddress], mtu: 1500 };
  }

  async apply(table: FabricTable, changes: readonly FabricChange[]): Promise<FabricOutcome[]> {
    return changes.map(({ name, kind }) => {
      let outcome: FabricOutcome = { code: 'ok', message: '' };
      for (const n of [name, ...dependentsOf(table, name, kind)]) {
        const w = wantsOf(table, n);
        if (w.blocked === undefined || !table.get(n)) this.blocked.delete(n);
        else this.blocked.set(n, w.blocked);
        if (n === name && w.conflict) outcome = { code: 'invalid', message: w.blocked ?? '' };
      }
      return outcome;
    });
  }

  async prune(): Promise<void> {}

  /** Nothing carries packets here: a peer counts as reachable when it would be programmed. */
  async peerStates(table: FabricTable): Promise<PeerState[]> {
    return table.peers().map((o) => {
      const why = this.blocked.get(o.name);
      return {
        name: o.name,
        reachable: why === undefined,
        offloaded: false,
        txPackets: 0,
        rxPackets: 0,
        lastError: why ?? '',
      };
    });
  }
}
