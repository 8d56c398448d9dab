import { expect } from 'chai';
import { formatDpus } from '../../cli/dpus-command';
import { formatPeers } from '../../cli/peers-command';
import { FabricStatus, StatusResponse } from '../../proto/gen/workloadnet/v1/workload';

// What `workloadnet peers` and `workloadnet dpus` print of the host port (core/host-port/host-port.ts):
// where it is and what it routes, or why there is none.

describe('CLI: the host port in peers and dpus', () => {
  const attached = {
    state: 'attached',
    network: 'default',
    interface: 'wn-host0',
    netns: '',
    addresses: ['10.244.0.7'],
    dpu: 'dpu-a',
    routes: ['10.244.0.0/16'],
    reason: '',
  };

  it('peers shows the host port attached: interface, address, DPU, network and routes', () => {
    const f = FabricStatus.fromPartial({ mode: 'vxlan', ready: true, node: 'n1', hostPort: attached });
    expect(formatPeers(f)).to.include(
      'host port:   wn-host0 10.244.0.7 on DPU dpu-a (network default, routes 10.244.0.0/16)\n',
    );
  });

  it('peers says why there is none, and that its DPU is away', () => {
    const pending = FabricStatus.fromPartial({
      mode: 'vxlan',
      hostPort: { state: 'pending', reason: 'no DPU of this node carries the fabric yet' },
    });
    expect(formatPeers(pending)).to.include(
      'host port:   pending: no DPU of this node carries the fabric yet\n',
    );
    const away = FabricStatus.fromPartial({
      mode: 'vxlan',
      hostPort: { ...attached, reason: 'its DPU dpu-a is away' },
    });
    expect(formatPeers(away)).to.include('(network default, routes 10.244.0.0/16); its DPU dpu-a is away\n');
    expect(formatPeers(FabricStatus.fromPartial({ mode: 'vxlan' }))).to.not.include('host port');
  });

  it('shows the first few routes and how many there are, or only the count when Status left them out', () => {
    const routes = Array.from({ length: 5001 }, (_, i) => `10.${64 + (i >> 8)}.${i % 256}.0/24`);
    const many = FabricStatus.fromPartial({
      mode: 'vxlan',
      hostPort: { ...attached, routes, routeCount: routes.length },
    });
    expect(formatPeers(many)).to.include(
      '(network default, routes 10.64.0.0/24,10.64.1.0/24,10.64.2.0/24,10.64.3.0/24,… 5001 in all)\n',
    );
    const counted = StatusResponse.fromPartial({
      backend: 'dpu',
      dpus: [{ id: 'dpu-a', connected: true, healthy: true, synced: true, fabric: { carries: true } }],
      fabric: { mode: 'vxlan', hostPort: { ...attached, routes: [], routeCount: 5001 } },
    });
    expect(formatDpus(counted)).to.include('(network default, routes 5001 ranges)\n');
  });

  it('dpus shows it below the agents', () => {
    const st = StatusResponse.fromPartial({
      backend: 'dpu',
      dpus: [{ id: 'dpu-a', connected: true, healthy: true, synced: true, fabric: { carries: true } }],
      fabric: { mode: 'vxlan', hostPort: { state: 'off', reason: 'dpu.hostPort is false' } },
    });
    expect(formatDpus(st)).to.match(/host port: off: dpu\.hostPort is false\n$/);
  });
});
