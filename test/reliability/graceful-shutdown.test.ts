import { expect } from 'chai';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ServiceError } from '@grpc/grpc-js';
import { ApiClient } from '../../cli/api-client';
import { DaemonProcess } from '../support/daemon-process';
import { InProcessDaemon } from '../support/in-process-daemon';
import { attachRequest } from '../support/attach-request';
import { NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { RecordingBackend } from '../support/recording-backend';
import { cniEnvelope } from '../support/cni-http';
import { makeNodeNamespace } from './node-namespace';
import { SimProcess } from '../support/sim-process';
import { waitUntil } from '../support/wait-until';

// SIGTERM while clients hold idle connections. Before: the daemon was still alive 30 s later with 50
// idle CNI connections (the CNI server waited for them to go, the API for its own idle clients), and
// the unit's stop timeout SIGKILLed it. Now it stops accepting, lets calls in flight finish, closes idle
// connections at once and the rest at shutdownTimeoutMs, and exits 0.

const SHUTDOWN_TIMEOUT_MS = 2000;
/** Stopping the backend and the store after the servers, and process exit. */
const MARGIN_MS = 2000;

function idleConnection(socketPath: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socketPath, () => resolve(s));
    s.on('error', reject);
  });
}

describeRoot('graceful shutdown (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  const namespaces = new NetnsSet('wn-harden-');
  let dir: string;

  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-harden-stop-'))));
  afterEach(() => {
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('exits 0 within the shutdown deadline on SIGTERM with 50 idle CNI connections and idle gRPC clients', async () => {
    const node = makeNodeNamespace(namespaces);
    const config = path.join(dir, 'config.json');
    // Long request timeouts, so that it is the shutdown, not the timeouts, that ends the connections.
    fs.writeFileSync(
      config,
      JSON.stringify({
        shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS,
        cniHeaderTimeoutMs: 120_000,
        apiIdleTimeoutMs: 600_000,
      }),
    );
    const daemon = await DaemonProcess.start({
      dir,
      netns: node,
      args: ['--config', config, '--pod-cidr', '10.244.0.0/24'],
    });
    const held: net.Socket[] = [];
    const clients: ApiClient[] = [];
    const agent = new http.Agent({ keepAlive: true, maxSockets: 10 });
    try {
      for (let i = 0; i < 50; i++) held.push(await idleConnection(daemon.cniSocket));
      // Kept-alive CNI connections that completed a request (a VERSION call) and wait for the next.
      const version = cniEnvelope({ CNI_COMMAND: 'VERSION' }, JSON.stringify({ cniVersion: '1.1.0' }));
      await Promise.all(
        Array.from(
          { length: 10 },
          () =>
            new Promise<void>((resolve, reject) => {
              const req = http.request(
                { socketPath: daemon.cniSocket, method: 'POST', path: '/v1/cni', agent },
                (res) => res.resume().on('end', () => resolve()),
              );
              req.on('error', reject);
              req.end(version);
            }),
        ),
      );
      // gRPC clients with an open, idle channel.
      for (let i = 0; i < 5; i++) {
        const c = new ApiClient(daemon.socket, 5000);
        await c.status();
        clients.push(c);
      }

      const started = Date.now();
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        daemon.child.once('exit', (code, signal) => resolve({ code, signal })),
      );
      daemon.child.kill('SIGTERM');
      const { code, signal } = await exited;
      const took = Date.now() - started;
      expect(signal, daemon.log()).to.equal(null);
      expect(code, daemon.log()).to.equal(0);
      expect(took, `exited after ${took} ms`).to.be.at.most(SHUTDOWN_TIMEOUT_MS + MARGIN_MS);
      expect(fs.existsSync(daemon.cniSocket), 'CNI socket removed').to.equal(false);
    } finally {
      for (const s of held) s.destroy();
      for (const c of clients) c.close();
      agent.destroy();
      await daemon.kill('SIGKILL').catch(() => undefined);
    }
  });

  it('lets a call in flight finish before it stops, and refuses new connections meanwhile', async () => {
    const backend = new RecordingBackend();
    backend.attachDelayMs = 1000;
    const d = await InProcessDaemon.start(backend, { shutdownTimeoutMs: 5000 }, { dir });
    const ns = namespaces.add();
    const attaching = d.client.call(d.client.raw.attach, attachRequest('in-flight', ns.path));
    while (backend.calls.length === 0) await new Promise((r) => setTimeout(r, 10));
    const stopping = d.daemon.stop();
    // Not accepting any more: a new client cannot connect.
    await new Promise((r) => setTimeout(r, 100));
    const late = new ApiClient(d.config.socket, 1000);
    const lateOutcome = await late.status().then(
      () => 'answered',
      () => 'refused',
    );
    late.close();
    expect(lateOutcome).to.equal('refused');
    const res = await attaching;
    expect(res.ip).to.have.length(1);
    await stopping;
    d.client.close();
  });

  // SIGTERM while an Attach waits for a DPU agent that never acks. Before: the caller got CANCELLED,
  // the store closed at the shutdown deadline under the attach, its rollback could not remove the row
  // ("Database is closed"), and the next start repaired that row into a live port: a port the runtime
  // was told failed. Now the row of an attach still in flight goes before the store closes.
  it('leaves no row and no port of an Attach cancelled by shutdown while its agent never acks', async () => {
    const node = makeNodeNamespace(namespaces);
    const agentSocket = path.join(dir, 'agent.sock');
    const config = path.join(dir, 'config.json');
    // The agent's silence outlasts the shutdown: it is the shutdown that ends the attach.
    fs.writeFileSync(
      config,
      JSON.stringify({ shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS, dpu: { ackTimeoutMs: 120_000 } }),
    );
    const args = ['--config', config, '--backend', 'dpu', '--agent-socket', agentSocket];
    const opts = { dir, netns: node, args: [...args, '--pod-cidr', '10.244.9.0/24'] };
    const ready = async (d: DaemonProcess): Promise<void> =>
      waitUntil(async () => (await d.client.status()).ready, 'the agent', 20_000, {
        intervalMs: 100,
      });
    const sims: SimProcess[] = [];
    const daemons: DaemonProcess[] = [];
    try {
      daemons.push(await DaemonProcess.start(opts));
      const daemon = daemons[0]!;
      const silent = SimProcess.start({
        socket: agentSocket,
        agentId: 'stop-dpu',
        stateFile: path.join(dir, 'silent.json'),
        extra: ['--ack-latency-ms', '600000'],
      });
      sims.push(silent);
      await ready(daemon);

      const ns = namespaces.add();
      const attaching = daemon.client
        .call(daemon.client.raw.attach, attachRequest('cut-short', ns.path))
        .then(
          () => undefined,
          (err: ServiceError) => err,
        );
      await silent.waitForState(
        (s) => s.ports.some((p) => p.name === 'cut-short/eth0'),
        'the port programmed, its ack withheld',
      );
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        daemon.child.once('exit', (code, signal) => resolve({ code, signal })),
      );
      daemon.child.kill('SIGTERM');
      const failure = await attaching;
      expect(failure, 'the caller is told the attach failed').to.not.equal(undefined);
      const { code, signal } = await exited;
      expect(signal, daemon.log()).to.equal(null);
      expect(code, daemon.log()).to.equal(0);
      await silent.stop('SIGKILL');

      // The agent comes back acking; the daemon restarts beside it.
      const sim = SimProcess.start({
        socket: agentSocket,
        agentId: 'stop-dpu',
        stateFile: path.join(dir, 'sim.json'),
      });
      sims.push(sim);
      daemons.push(await DaemonProcess.start(opts));
      const again = daemons[1]!;
      await ready(again);
      const st = await again.client.status();
      expect(st.reconcile?.repaired, JSON.stringify(st.reconcile)).to.equal(0);
      expect(st.attachments).to.equal(0);
      const list = (await again.client.call(again.client.raw.list, {})).attachments;
      expect(list.map((a) => a.workloadId)).to.deep.equal([]);
      const state = await sim.waitForState(() => true, 'the agent connected');
      expect(state.ports.map((p) => p.name)).to.deep.equal([]);
    } finally {
      for (const d of daemons) await d.kill('SIGKILL').catch(() => undefined);
      for (const s of sims) await s.stop('SIGKILL').catch(() => undefined);
    }
  });
});
