import { expect } from 'chai';
import { internal } from '../../core/errors';
import { MetricsServer } from '../../core/serve/metrics-server';
import { InProcessDaemon } from '../support/in-process-daemon';
import { attachRequest } from '../support/attach-request';
import { RecordingBackend } from '../support/recording-backend';
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
  let d: InProcessDaemon;
  let server: MetricsServer;
  let backend: RecordingBackend;

  before(async () => {
    backend = new RecordingBackend();
    d = await InProcessDaemon.start(backend, {}, { netns: namespaces });
    server = new MetricsServer('127.0.0.1:0', d.metrics);
    await server.start();
  });
  after(async () => {
    await server.stop();
    await d.dispose();
    namespaces.cleanup();
  });

  it('counts attaches by result code, latency histograms, errors and pool usage after N attaches and one failure', async () => {
    const netnsPath = namespaces.add().path;
    const n = 4;
    for (let i = 0; i < n; i++) {
      await d.client.call(d.client.raw.attach, attachRequest(`m${i}`, netnsPath));
    }
    backend.failAttach = internal('boom');
    await d.client.call(d.client.raw.attach, attachRequest('bad', netnsPath)).catch(() => undefined);
    await d.client.call(d.client.raw.status, {});

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
});
