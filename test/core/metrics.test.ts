import { expect } from 'chai';
import type { BackendHealth, DpuAgentStatus, DpuFabricStatus } from '../../core/backend';
import { internal } from '../../core/errors';
import { MetricsServer } from '../../core/serve/metrics-server';
import { attachRequest } from '../support/attach-request';
import { recordingDaemon } from '../support/recording-daemon';
import { StandInNamespaces } from '../support/stand-in-netns';

/** The value of one sample line, e.g. `workloadnet_errors_total{op="attach",code="INTERNAL"}`. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const ok = Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`));
    if (ok) return Number(line.split(' ').pop());
  }
  return undefined;
}

// The recording backend enters no namespace, so a stand-in serves.
describe('Prometheus metrics (stand-in namespaces, no root needed)', () => {
  const namespaces = new StandInNamespaces();
  const rec = recordingDaemon({ netns: namespaces });
  let server: MetricsServer;

  before(async () => {
    server = new MetricsServer('127.0.0.1:0', rec.daemon.metrics);
    await server.start();
  });
  after(async () => {
    await server.stop();
    namespaces.cleanup();
  });

  it('counts attaches by result code, latency histograms, errors and pool usage after N attaches and one failure', async () => {
    const netnsPath = namespaces.add().path;
    const n = 4;
    for (let i = 0; i < n; i++) {
      await rec.daemon.client.call(rec.daemon.client.raw.attach, attachRequest(`m${i}`, netnsPath));
    }
    rec.backend.failAttach = internal('boom');
    await rec.daemon.client
      .call(rec.daemon.client.raw.attach, attachRequest('bad', netnsPath))
      .catch(() => undefined);
    await rec.daemon.client.status();

    const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
    expect(res.status).to.equal(200);
    const text = await res.text();
    expect(
      sample(text, 'workloadnet_call_duration_seconds_count', {
        op: 'attach',
        backend: 'recording',
        code: 'OK',
      }),
    ).to.equal(n);
    expect(
      sample(text, 'workloadnet_call_duration_seconds_count', { op: 'attach', code: 'INTERNAL' }),
    ).to.equal(1);
    expect(sample(text, 'workloadnet_errors_total', { op: 'attach', code: 'INTERNAL' })).to.equal(1);
    expect(sample(text, 'workloadnet_pool_addresses_used', { pool: '10.77.0.0/24', family: '4' })).to.equal(
      n,
    );
    expect(sample(text, 'workloadnet_attachments', {})).to.equal(n);
    // One network, "default", with the failed attach not counted.
    expect(sample(text, 'workloadnet_network_attachments', { network: 'default' })).to.equal(n);
    expect(sample(text, 'workloadnet_network_ready', { network: 'default', backend: 'recording' })).to.equal(
      1,
    );
    expect((await fetch(`http://127.0.0.1:${server.port}/other`)).status).to.equal(404);
  });
  it("sets each DPU agent's part of the fabric from Status, and drops the series of an agent no longer reported", async () => {
    const fabric = (f: Partial<DpuFabricStatus>): DpuFabricStatus => ({
      carries: true,
      note: '',
      vtep: '10.100.1.7',
      objectsAcked: 0,
      objectsDesired: 0,
      peersReachable: 0,
      peersTotal: 0,
      ...f,
    });
    // No hardware to speak of: the series under test are the fabric's.
    const bare = { ports: 0, pfs: [], vfsTotal: 0, vfsFree: 0, firmwareVersion: '', agentVersion: '' };
    const agent = (id: string, f?: DpuFabricStatus): DpuAgentStatus => ({
      id,
      connected: true,
      healthy: true,
      synced: true,
      bootId: 'b',
      protocolVersion: f?.carries ? 3 : 2,
      ...bare,
      fabric: f,
    });
    let dpus: DpuAgentStatus[] = [
      agent('dpu-a', fabric({ objectsAcked: 7, objectsDesired: 10, peersReachable: 2, peersTotal: 3 })),
      agent(
        'dpu-b',
        fabric({ carries: false, note: 'does not carry the fabric: protocol version 2', vtep: '' }),
      ),
    ];
    const original = rec.backend.health.bind(rec.backend);
    rec.backend.health = (): Promise<BackendHealth> => Promise.resolve({ ready: true, reasons: [], dpus });
    try {
      const scrape = async (): Promise<string> => {
        await rec.daemon.client.status();
        return (await fetch(`http://127.0.0.1:${server.port}/metrics`)).text();
      };
      let text = await scrape();
      const objects = (agentId: string, state: string): number | undefined =>
        sample(text, 'workloadnet_dpu_agent_fabric_objects', { agent: agentId, state });
      const peers = (agentId: string, state: string): number | undefined =>
        sample(text, 'workloadnet_dpu_agent_fabric_peers', { agent: agentId, state });
      expect(sample(text, 'workloadnet_dpu_agent_carries_fabric', { agent: 'dpu-a' })).to.equal(1);
      expect(objects('dpu-a', 'acked')).to.equal(7);
      expect(objects('dpu-a', 'desired')).to.equal(10);
      expect(peers('dpu-a', 'reachable')).to.equal(2);
      expect(peers('dpu-a', 'total')).to.equal(3);
      // An agent that does not carry the fabric says so, and has no object or peer series.
      expect(sample(text, 'workloadnet_dpu_agent_carries_fabric', { agent: 'dpu-b' })).to.equal(0);
      expect(objects('dpu-b', 'desired')).to.equal(undefined);
      expect(peers('dpu-b', 'total')).to.equal(undefined);

      // dpu-a all acknowledged; dpu-b gone from Status: its series go too. dpu-c: the fabric off.
      dpus = [
        agent('dpu-a', fabric({ objectsAcked: 10, objectsDesired: 10, peersReachable: 3, peersTotal: 3 })),
        agent('dpu-c'),
      ];
      text = await scrape();
      expect(objects('dpu-a', 'acked')).to.equal(10);
      expect(peers('dpu-a', 'reachable')).to.equal(3);
      expect(text).to.not.match(/agent="dpu-b"/);
      expect(sample(text, 'workloadnet_dpu_agent_healthy', { agent: 'dpu-c' })).to.equal(1);
      expect(sample(text, 'workloadnet_dpu_agent_carries_fabric', { agent: 'dpu-c' })).to.equal(undefined);

      // dpu-a away: how it sees its peers is unknown, so no reachable series (its total stays).
      dpus = [
        {
          ...agent(
            'dpu-a',
            fabric({ objectsAcked: 10, objectsDesired: 10, peersReachable: 3, peersTotal: 3 }),
          ),
          connected: false,
          healthy: false,
        },
      ];
      text = await scrape();
      expect(peers('dpu-a', 'reachable')).to.equal(undefined);
      expect(peers('dpu-a', 'total')).to.equal(3);
    } finally {
      rec.backend.health = original;
    }
  });
});
