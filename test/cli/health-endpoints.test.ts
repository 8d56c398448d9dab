import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Metrics } from '../../core/metrics';
import { MetricsServer, type Readiness } from '../../core/serve/metrics-server';
import { DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { NetnsSet } from '../support/netns';

// The daemon's HTTP listener (metricsListen): /metrics, /healthz (alive: Status answers) and /readyz
// (Status ready, else 503 with the reasons), which the manifest's probes ask with httpGet.

async function get(port: number, p: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${p}`);
  return { status: res.status, body: await res.text() };
}

describe('health and readiness over HTTP', () => {
  let readiness: () => Promise<Readiness>;
  let server: MetricsServer;
  before(async () => {
    server = new MetricsServer('127.0.0.1:0', new Metrics(), {
      readiness: () => readiness(),
      timeoutMs: 300,
    });
    await server.start();
  });
  after(() => server.stop());

  it('answers /readyz 200 when Status is ready, and 503 with each reason a line when not', async () => {
    readiness = () => Promise.resolve({ ready: true, reasons: [] });
    expect(await get(server.port, '/readyz')).to.deep.equal({ status: 200, body: 'ready\n' });
    readiness = () =>
      Promise.resolve({ ready: false, reasons: ['pool source: no podCIDRs yet', 'backend: starting'] });
    expect(await get(server.port, '/readyz')).to.deep.equal({
      status: 503,
      body: 'not ready:\n  pool source: no podCIDRs yet\n  backend: starting\n',
    });
  });

  it('answers /healthz 200 while not ready (no restart for that), 503 when Status fails or hangs', async () => {
    readiness = () => Promise.resolve({ ready: false, reasons: ['starting'] });
    expect(await get(server.port, '/healthz')).to.deep.equal({ status: 200, body: 'ok\n' });
    readiness = () => Promise.reject(new Error('store closed'));
    expect(await get(server.port, '/healthz')).to.deep.equal({
      status: 503,
      body: 'Status failed: store closed\n',
    });
    readiness = () => new Promise(() => undefined);
    const hung = await get(server.port, '/healthz');
    expect(hung.status).to.equal(503);
    expect(hung.body).to.equal('Status did not answer within 0.3 s\n');
    expect((await get(server.port, '/readyz')).status).to.equal(503);
  });

  it('still serves /metrics, and 404 names the paths it serves', async () => {
    const m = await get(server.port, '/metrics');
    expect(m.status).to.equal(200);
    expect(m.body).to.include('workloadnet_');
    const other = await get(server.port, '/other');
    expect(other.status).to.equal(404);
    expect(other.body).to.include('/healthz').and.include('/readyz');
  });

  it('says /readyz is not ready when it was given no readiness check', async () => {
    const bare = new MetricsServer('127.0.0.1:0', new Metrics());
    await bare.start();
    try {
      expect((await get(bare.port, '/readyz')).status).to.equal(503);
      expect((await get(bare.port, '/healthz')).status).to.equal(200);
    } finally {
      await bare.stop();
    }
  });
});

describeRoot('health and readiness of the daemon as it runs (linux backend, test-owned namespace)', () => {
  const namespaces = new NetnsSet('wn-hz-');
  let dir: string;
  let daemon: DaemonProcess | undefined;
  let node: string;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-hz-'));
    node = namespaces.addNode('10.250.7.1').name;
    daemon = await DaemonProcess.start({
      dir,
      netns: node,
      args: ['--pod-cidr', '10.251.7.0/24', '--metrics-listen', '127.0.0.1:9472'],
    });
  });
  after(async () => {
    await daemon?.stop();
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** An HTTP GET from inside the node's namespace, where the listener is. */
  const getInNode = (p: string): { status: number; body: string } => {
    const code = `fetch('http://127.0.0.1:9472${p}').then(async (r) => process.stdout.write(JSON.stringify({ status: r.status, body: await r.text() })))`;
    return JSON.parse(
      execFileSync('ip', ['netns', 'exec', node, process.execPath, '-e', code], { encoding: 'utf8' }),
    ) as { status: number; body: string };
  };

  it('serves /healthz, /readyz (Status ready) and /metrics on metricsListen', () => {
    expect(getInNode('/healthz')).to.deep.equal({ status: 200, body: 'ok\n' });
    expect(getInNode('/readyz')).to.deep.equal({ status: 200, body: 'ready\n' });
    expect(getInNode('/metrics').body).to.include('workloadnet_backend_ready');
  });
});
