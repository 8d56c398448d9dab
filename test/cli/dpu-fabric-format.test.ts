import { expect } from 'chai';
import { formatDpus } from '../../cli/dpus-command';
import { formatPeers } from '../../cli/peers-command';
import {
  FabricStatus,
  StatusResponse,
  type DeepPartial,
  type DpuStatus,
} from '../../proto/gen/workloadnet/v1/workload';

// What `workloadnet dpus` and `workloadnet peers` print of the DPUs' fabric: per DPU whether it carries
// it (and why not), its VTEP, objects and peers; per peer its DPU endpoints and what each local DPU sees.

/** A Status of the DPU backend with these DPUs. */
const dpuStatus = (dpus: DeepPartial<DpuStatus>[]): StatusResponse =>
  StatusResponse.fromPartial({ backend: 'dpu', dpus });

describe('CLI: the DPU fabric in dpus and peers', () => {
  it('shows per DPU whether it carries the fabric, its VTEP, objects acked and peers reachable', () => {
    const st = dpuStatus([
      {
        id: 'dpu-a',
        connected: true,
        healthy: true,
        synced: true,
        protocolVersion: 3,
        fabric: {
          carries: true,
          vtep: '10.0.1.11',
          objectsAcked: 3,
          objectsDesired: 4,
          peersReachable: 1,
          peersTotal: 2,
        },
      },
      {
        id: 'dpu-b',
        connected: true,
        healthy: true,
        synced: true,
        protocolVersion: 2,
        fabric: { carries: false, note: 'does not carry the fabric: protocol version 2' },
      },
    ]);
    const text = formatDpus(st);
    expect(text).to.match(/HEARTBEAT\s+FABRIC\s+VTEP\s+OBJECTS\s+PEERS/);
    expect(text).to.match(/dpu-a\s+ready.*\syes\s+10\.0\.1\.11\s+3\/4\s+1\/2/);
    expect(text).to.match(/dpu-b\s+ready.*\sno\s+-\s+-\s+-/);
    expect(text).to.include('dpu-b: does not carry the fabric: protocol version 2\n');
  });

  it("shows an away DPU's reachable peers as unknown, not as its last word", () => {
    const st = dpuStatus([
      {
        id: 'dpu-a',
        connected: false,
        fabric: {
          carries: true,
          vtep: '10.0.1.11',
          objectsAcked: 4,
          objectsDesired: 4,
          peersReachable: 2,
          peersTotal: 2,
        },
      },
    ]);
    expect(formatDpus(st)).to.match(/dpu-a\s+away.*\syes\s+10\.0\.1\.11\s+4\/4\s+\?\/2/);
  });

  it('leaves the fabric columns out while the fabric is off', () => {
    const st = StatusResponse.fromPartial({ backend: 'dpu', dpus: [{ id: 'dpu-a', connected: true }] });
    expect(formatDpus(st)).to.not.include('FABRIC');
  });

  it("shows a peer's DPU endpoints with their slices and how each local DPU sees it", () => {
    const vtep = { mac: '0e:77:0a:00:02:0b', vni: 30574, port: 4789 };
    const f = FabricStatus.fromPartial({
      mode: 'vxlan',
      ready: true,
      node: 'n1',
      endpoints: [{ id: 'dpu-a', underlay: '10.0.1.11', mtu: 1500, vtep, prefixes: ['10.244.0.0/26'] }],
      peers: [
        {
          node: 'n2',
          path: 'vxlan',
          prefixes: ['10.244.1.0/26'],
          endpoints: [{ id: 'dpu-x', underlay: '10.0.2.11', mtu: 1500, vtep, prefixes: ['10.244.1.0/26'] }],
          seenBy: [
            {
              endpoint: 'dpu-a',
              reachable: true,
              offloaded: false,
              txPackets: 5,
              rxPackets: 7,
              lastError: 'late',
            },
          ],
        },
      ],
    });
    const text = formatPeers(f);
    for (const line of [
      '  endpoint:  dpu-a 10.0.1.11 (0e:77:0a:00:02:0b, vni 30574), mtu 1500: 10.244.0.0/26',
      'n2: endpoint dpu-x 10.0.2.11 (0e:77:0a:00:02:0b, vni 30574), mtu 1500: 10.244.1.0/26',
      'n2: seen by dpu-a: reachable, not offloaded, tx 5 rx 7 packets; last error: late',
    ])
      expect(text).to.include(line);
  });

  it("shows each peer's probes: reachable with its round trips, degraded with what it lost and since when", () => {
    const now = Date.parse('2026-01-01T00:01:00Z');
    const f = FabricStatus.fromPartial({
      mode: 'vxlan',
      ready: true,
      node: 'n1',
      peers: [
        {
          node: 'n2',
          path: 'vxlan',
          prefixes: ['10.244.2.0/24'],
          probe: { state: 'reachable', target: '10.244.2.0', rttMs: 0.42, medianRttMs: 0.5, answered: true },
        },
        {
          node: 'n3',
          path: 'vxlan',
          prefixes: ['10.244.3.0/24'],
          probe: {
            state: 'degraded',
            target: '10.244.3.0',
            rttMs: 12.4,
            medianRttMs: 11,
            lost: 4,
            answered: true,
            since: '2026-01-01T00:00:30Z',
          },
        },
        { node: 'n4', path: 'vxlan', prefixes: ['10.244.4.0/24'], probe: { state: 'unknown' } },
      ],
    });
    const lines = formatPeers(f, now).split('\n');
    expect(lines.find((l) => l.startsWith('n2'))).to.match(/\sreachable\s+0\.42 ms \(median 0\.50 ms\)\s/);
    expect(lines.find((l) => l.startsWith('n3'))).to.match(
      /\sdegraded \(4 lost, 30s\)\s+12 ms \(median 11 ms\)\s/,
    );
    expect(lines.find((l) => l.startsWith('n4'))).to.match(/\sunknown\s+-\s/);
  });
});
