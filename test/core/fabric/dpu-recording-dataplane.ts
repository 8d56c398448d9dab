import type { FabricReport, LocalNode, OwnPrefixes } from '../../../core/fabric-dataplane';
import type { NodeRecord, Peer, TunnelEndpoint } from '../../../core/peer-source';
import { ManualPeerSource, RecordingFabricDataplane } from '../../support/recording-fabric-dataplane';

// Stand-ins for a node whose DPUs carry the fabric: a dataplane whose DPUs the test sets (the DPU
// backend's is tested against the simulator), and a peer source that records what the node publishes.

/** A DPU dataplane stand-in: its DPUs set by the test, the own prefixes of every apply recorded. */
export class DpuDataplane extends RecordingFabricDataplane {
  readonly owns: Array<OwnPrefixes | undefined> = [];
  private listener?: (local: LocalNode) => void;

  constructor() {
    super();
    this.local = {
      underlay: ['192.0.2.1'],
      uplink: 'eth0',
      mtu: 1500,
      subnets: ['192.0.2.0/24'],
      endpoints: [],
    };
  }

  override async apply(peers: readonly Peer[], own?: OwnPrefixes): Promise<FabricReport> {
    this.owns.push(own);
    return super.apply(peers);
  }

  onLocalChange(listener: (local: LocalNode) => void): void {
    this.listener = listener;
  }

  /** The node's DPUs are now these. */
  setDpus(ids: string[]): void {
    this.setEndpoints(ids.map((id) => dpu(id)));
  }

  /** The node's DPUs are now these, as given (their own MTUs and underlays). */
  setEndpoints(endpoints: TunnelEndpoint[]): void {
    this.local = { ...this.local, endpoints };
    this.listener?.(this.local);
  }
}

export function dpu(id: string, i = Number(id.replace(/\D/g, '')) || 1): TunnelEndpoint {
  return {
    id,
    underlay: `198.51.100.${i}`,
    mtu: 1500,
    vtep: { mac: `0e:77:c6:33:64:0${i}`, vni: 30574, port: 4789 },
    prefixes: [],
  };
}

/** A peer source that records every record this node publishes. */
export class PublishingSource extends ManualPeerSource {
  readonly updates: NodeRecord[] = [];
  async update(self: NodeRecord): Promise<void> {
    this.updates.push(self);
  }
}
