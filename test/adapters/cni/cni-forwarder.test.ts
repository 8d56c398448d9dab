import { expect } from 'chai';
import { promises as fs } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawn } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import { CniError } from '../../../adapters/cni/cni-error';
import { CniHandler } from '../../../adapters/cni/cni-handler';
import { parseCniRequest } from '../../../adapters/cni/cni-request';
import { CniServer } from '../../../adapters/cni/cni-server';
import { LATEST_CNI_VERSION, SUPPORTED_CNI_VERSIONS } from '../../../adapters/cni/cni-version';
import { buildShim, runShim } from '../../support/cni-harness';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';
import { StandInNamespaces } from '../../support/stand-in-netns';

// What the native forwarder answers by itself (daemon unreachable, silent, or odd) and how it picks
// the socket.

describe('workloadnet-cni forwarder', function () {
  this.timeout(20000);

  let dir: string;
  let shim: string;
  const sockets: net.Server[] = [];

  before(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'wnc-fwd-'));
    shim = await buildShim(dir);
  });

  afterEach(async () => {
    await Promise.all(sockets.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  after(async () => {
    await fs.rm(dir, { recursive: true, force: true });
  });

  /** A raw unix-socket server whose behaviour the test chooses. */
  async function rawServer(name: string, onConnection: (c: net.Socket) => void): Promise<string> {
    const p = path.join(dir, name);
    await fs.rm(p, { force: true });
    const srv = net.createServer(onConnection);
    await new Promise<void>((resolve) => srv.listen(p, resolve));
    sockets.push(srv);
    return p;
  }

  // STATUS is the verb that needs the daemon and no other variable. No retry unless a test wants one.
  const status = { CNI_COMMAND: 'STATUS', WORKLOADNET_CNI_STATUS_CONNECT_RETRY_MS: '0' };
  /** A network config the daemon accepts for STATUS. */
  const cfg = (extra: Record<string, unknown> = {}): string =>
    JSON.stringify({ cniVersion: '1.1.0', name: 'wnc-net', type: 'workloadnet', ...extra });

  it('answers CNI error 50 naming the socket when no daemon listens', async () => {
    const missing = path.join(dir, 'nobody-here.sock');
    const run = await runShim(shim, status, JSON.stringify({ cniVersion: '1.0.0', socket: missing }));
    expect(run.exitCode).to.equal(1);
    const err = JSON.parse(run.stdout) as Record<string, unknown>;
    expect(err).to.include({ code: 50, cniVersion: '1.0.0' });
    expect(err.msg).to.contain(missing).and.contain('No such file or directory').and.contain('ENOENT');
  });

  it('answers CNI error 11 within the timeout when the daemon never answers', async () => {
    const held: net.Socket[] = [];
    const silent = await rawServer('silent.sock', (c) => {
      c.resume();
      held.push(c);
    });
    try {
      const run = await runShim(
        shim,
        { ...status, WORKLOADNET_CNI_TIMEOUT_MS: '400' },
        JSON.stringify({ socket: silent }),
      );
      expect(run.exitCode).to.equal(1);
      expect(JSON.parse(run.stdout)).to.include({ code: 11 });
      expect(run.ms).to.be.within(350, 3000);
    } finally {
      held.forEach((c) => c.destroy());
    }
  });

  it('answers CNI error 11 when the daemon drops the connection mid-call', async () => {
    const rude = await rawServer('rude.sock', (c) => c.once('data', () => c.destroy()));
    const run = await runShim(shim, status, JSON.stringify({ socket: rude }));
    expect(run.exitCode).to.equal(1);
    expect(JSON.parse(run.stdout)).to.include({ code: 11 });
  });

  it('prints the body and exits with the status the daemon names', async () => {
    const scripted = await rawServer('scripted.sock', (c) => {
      c.once('data', () => {
        const body = '{"hello":"world"}';
        c.end(`HTTP/1.1 200 OK\r\nX-CNI-Exit-Code: 7\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      });
    });
    const run = await runShim(shim, status, JSON.stringify({ socket: scripted }));
    expect(run.exitCode).to.equal(7);
    expect(run.stdout).to.equal('{"hello":"world"}');
  });

  it('refuses an answer without X-CNI-Exit-Code instead of guessing success', async () => {
    const other = await rawServer('other.sock', (c) =>
      c.once('data', () => c.end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}')),
    );
    const run = await runShim(shim, status, JSON.stringify({ socket: other }));
    expect(run.exitCode).to.equal(1);
    expect(JSON.parse(run.stdout)).to.include({ code: 999 });
  });

  describe('socket selection', () => {
    let backend: RecordingBackend;
    let daemon: InProcessDaemon;
    let server: CniServer;
    let real: string;

    beforeEach(async () => {
      backend = new RecordingBackend();
      daemon = await InProcessDaemon.start(backend);
      real = path.join(dir, 'daemon.sock');
      server = new CniServer(daemon.daemon.service, { socketPath: real });
      await server.listen();
    });

    afterEach(async () => {
      await server.close();
      await daemon.dispose();
    });

    it('uses WORKLOADNET_CNI_SOCKET when the config has no "socket" field', async () => {
      const run = await runShim(shim, { ...status, WORKLOADNET_CNI_SOCKET: real }, cfg());
      expect(run.exitCode, run.stdout).to.equal(0);
      expect(backend.calls).to.deep.equal([]);
    });

    it('prefers the config\'s top-level "socket" over the environment', async () => {
      const wrong = path.join(dir, 'wrong.sock');
      const run = await runShim(shim, { ...status, WORKLOADNET_CNI_SOCKET: wrong }, cfg({ socket: real }));
      expect(run.exitCode, run.stdout).to.equal(0);
    });

    it('ignores a "socket" key nested inside prevResult or runtimeConfig', async () => {
      const decoy = path.join(dir, 'decoy.sock');
      const stdin = cfg({
        prevResult: { socket: decoy, interfaces: [{ name: 'x', socketPath: decoy }] },
        runtimeConfig: { socket: decoy },
        args: ['{"socket":', decoy],
        socket: real,
      });
      const run = await runShim(shim, status, stdin);
      expect(run.exitCode, run.stdout).to.equal(0);
    });

    it('decodes JSON escapes in the "socket" value', async () => {
      const escaped =
        cfg().slice(0, -1) + `,"socket":"${real.replace(/\//g, '\\/').replace('daemon', '\\u0064aemon')}"}`;
      const run = await runShim(shim, status, escaped);
      expect(run.exitCode, run.stdout).to.equal(0);
    });

    it('answers 50 rather than falling back when "socket" is longer than a unix socket path allows', async () => {
      const run = await runShim(
        shim,
        { ...status, WORKLOADNET_CNI_SOCKET: real },
        JSON.stringify({ socket: `/${'s'.repeat(300)}` }),
      );
      expect(run.exitCode).to.equal(1);
      expect(JSON.parse(run.stdout)).to.include({ code: 50 });
    });
  });

  describe('answers without a daemon', () => {
    // Every call here names a socket nobody listens on, without retry: an answer proves it was local.
    let nowhere: string;
    const noRetry = { WORKLOADNET_CNI_CONNECT_RETRY_MS: '0', WORKLOADNET_CNI_STATUS_CONNECT_RETRY_MS: '0' };
    before(() => {
      nowhere = path.join(dir, 'nobody.sock');
    });

    it('answers VERSION with the versions the daemon speaks, exactly as the daemon does', async () => {
      const daemon = await InProcessDaemon.start(new RecordingBackend());
      const daemonAnswer = await new CniHandler(daemon.daemon.service)
        .handle({ CNI_COMMAND: 'VERSION' }, '')
        .finally(() => daemon.dispose());
      for (const stdin of ['{"cniVersion": "1.0.0"}', '', 'not json at all', cfg({ socket: nowhere })]) {
        const run = await runShim(shim, { CNI_COMMAND: 'VERSION', WORKLOADNET_CNI_SOCKET: nowhere }, stdin);
        expect(run.exitCode, run.stdout).to.equal(0);
        expect(run.stdout).to.equal(daemonAnswer.stdout);
        const v = JSON.parse(run.stdout) as { cniVersion: string; supportedVersions: string[] };
        expect(v.supportedVersions).to.deep.equal([...SUPPORTED_CNI_VERSIONS]);
        expect(v.cniVersion).to.equal(LATEST_CNI_VERSION);
      }
    });

    it('answers code 4 for each missing required variable, with the message the daemon gives', async () => {
      const full: Record<string, string> = {
        CNI_CONTAINERID: 'ctr1',
        CNI_NETNS: '/var/run/netns/x',
        CNI_IFNAME: 'eth0',
        CNI_PATH: '/opt/cni/bin',
      };
      for (const command of ['ADD', 'CHECK', 'DEL']) {
        for (const drop of Object.keys(full)) {
          const env: Record<string, string> = { ...full, CNI_COMMAND: command };
          delete env[drop];
          const stdin = cfg({ socket: nowhere });
          let expected: CniError | undefined;
          try {
            parseCniRequest(env, stdin);
          } catch (err) {
            expected = err as CniError;
          }
          const run = await runShim(shim, { ...env, ...noRetry }, stdin);
          const got = JSON.parse(run.stdout) as { code: number; msg: string };
          if (expected?.code === 4) {
            expect(got, `${command} without ${drop}`).to.include({ code: 4, msg: expected.message });
          } else {
            // Not required for this verb (DEL needs no CNI_NETNS): the call went on to the socket.
            expect(got.code, `${command} without ${drop}`).to.equal(50);
          }
        }
      }
    });

    it('answers code 4 to a missing or unknown CNI_COMMAND', async () => {
      const none = await runShim(shim, noRetry, cfg({ socket: nowhere }));
      expect(JSON.parse(none.stdout)).to.include({
        code: 4,
        msg: 'required env variables [CNI_COMMAND] missing',
      });
      const odd = await runShim(shim, { CNI_COMMAND: 'FROB', ...noRetry }, cfg({ socket: nowhere }));
      expect(JSON.parse(odd.stdout)).to.include({ code: 4, msg: 'unknown CNI_COMMAND: FROB' });
    });

    it('answers code 6 to a config that is not JSON or not an object, labelled with our latest version', async () => {
      for (const stdin of [
        '{"cniVersion": "1.0.0", "name": ',
        '',
        '[1,2]',
        '"x"',
        '{"a":1} {}',
        '{"a":01}',
      ]) {
        const run = await runShim(shim, { ...status, WORKLOADNET_CNI_SOCKET: nowhere }, stdin);
        expect(run.exitCode).to.equal(1);
        expect(JSON.parse(run.stdout), JSON.stringify(stdin)).to.include({ code: 6 });
      }
    });

    it('answers code 6 to a config larger than the daemon accepts, without reading all of it', async () => {
      const run = await runShim(shim, status, cfg({ socket: nowhere, padding: 'x'.repeat(3 << 20) }));
      expect(JSON.parse(run.stdout)).to.include({ code: 6 });
      expect((JSON.parse(run.stdout) as { msg: string }).msg).to.contain('exceeds');
    });

    it("labels its errors with the config's cniVersion when the daemon speaks it", async () => {
      const ok = await runShim(shim, status, JSON.stringify({ cniVersion: '0.4.0', socket: nowhere }));
      expect(JSON.parse(ok.stdout)).to.include({ code: 50, cniVersion: '0.4.0' });
      const odd = await runShim(shim, status, JSON.stringify({ cniVersion: '9.9.9', socket: nowhere }));
      expect(JSON.parse(odd.stdout)).to.include({ code: 50, cniVersion: LATEST_CNI_VERSION });
    });

    it('names the mistake when the socket is the gRPC API socket, instead of asking for a retry', async () => {
      const grpcSock = path.join(dir, 'api.sock');
      const server = new grpc.Server();
      await new Promise<void>((resolve, reject) =>
        server.bindAsync(`unix://${grpcSock}`, grpc.ServerCredentials.createInsecure(), (err) =>
          err ? reject(err) : resolve(),
        ),
      );
      try {
        const run = await runShim(shim, status, cfg({ socket: grpcSock }));
        const err = JSON.parse(run.stdout) as { code: number; msg: string; details: string };
        expect(err.code).to.equal(7);
        expect(err.msg).to.contain(grpcSock).and.contain('gRPC');
        expect(err.details).to.contain('--cni-socket');
      } finally {
        server.forceShutdown();
      }
    });
  });

  describe('daemon restarts', () => {
    // The daemon's service is up throughout; what comes and goes is its CNI socket.
    const namespaces = new StandInNamespaces();
    let backend: RecordingBackend;
    let daemon: InProcessDaemon;
    let server: CniServer | undefined;
    let sock: string;
    const add = {
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'ctr-restart',
      CNI_NETNS: '/proc/1/ns/net',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
    };

    beforeEach(async () => {
      backend = new RecordingBackend();
      daemon = await InProcessDaemon.start(backend, {}, { netns: namespaces });
      sock = path.join(dir, `restart-${Math.random().toString(36).slice(2)}.sock`);
      await fs.rm(sock, { force: true });
    });
    afterEach(async () => {
      await server?.close();
      server = undefined;
      await daemon.dispose();
    });
    after(() => namespaces.cleanup());

    /** A socket file left by a process killed with SIGKILL: connecting to it is refused. */
    async function staleSocket(p: string): Promise<void> {
      const code = `require('net').createServer().listen(${JSON.stringify(p)}, () => process.kill(process.pid, 'SIGKILL'))`;
      await new Promise<void>((resolve) =>
        spawn(process.execPath, ['-e', code]).once('exit', () => resolve()),
      );
      await fs.access(p);
    }

    async function listenAfter(ms: number): Promise<void> {
      await new Promise((r) => setTimeout(r, ms));
      server = new CniServer(daemon.daemon.service, { socketPath: sock });
      await server.listen();
    }

    it('waits for a socket that is missing and serves the call once the daemon is back', async () => {
      const call = runShim(
        shim,
        { CNI_COMMAND: 'STATUS' },
        cfg({ socket: sock, statusConnectRetryMs: 5000 }),
      );
      await listenAfter(700);
      const run = await call;
      expect(run.exitCode, run.stdout).to.equal(0);
    });

    it('waits while the socket refuses connections (a killed daemon) and serves the call after', async () => {
      await staleSocket(sock);
      const call = runShim(shim, { ...add, CNI_NETNS: '/proc/self/ns/net' }, cfg({ socket: sock }));
      // The daemon's own start-up removes the dead socket before binding a new one.
      await listenAfter(1500);
      const run = await call;
      // The daemon refuses its own namespace with 4: what matters is that the daemon answered.
      expect(JSON.parse(run.stdout || '{}'), run.stdout).to.not.have.property('code', 50);
      expect(run.stdout).to.not.contain(sock);
    });

    it('gives up after the configured time with code 50 naming the socket and the errno', async () => {
      await staleSocket(sock);
      const run = await runShim(shim, add, cfg({ socket: sock, connectRetryMs: 300 }));
      const err = JSON.parse(run.stdout) as { code: number; msg: string };
      expect(err.code).to.equal(50);
      expect(err.msg).to.contain(sock).and.contain('ECONNREFUSED').and.contain('waited');
      expect(run.ms).to.be.at.least(300);
    });

    it("waits 1 s by default for STATUS, the runtimes' readiness probe", async () => {
      const run = await runShim(shim, { CNI_COMMAND: 'STATUS' }, cfg({ socket: sock }));
      const err = JSON.parse(run.stdout) as { code: number; msg: string };
      expect(err).to.include({ code: 50 });
      expect(err.msg)
        .to.contain('ENOENT')
        .and.match(/waited 1\d\d\d ms/);
    });

    it('waits longer than STATUS does by default for ADD/DEL/CHECK/GC (10 s)', async () => {
      // Attached while the CNI socket was up, before this test took it away.
      const ns = namespaces.add().path;
      await daemon.daemon.service.attach({ workloadId: 'ctr-restart', ifName: 'eth0', netnsPath: ns });
      const call = runShim(shim, { ...add, CNI_COMMAND: 'DEL', CNI_NETNS: ns }, cfg({ socket: sock }));
      await listenAfter(2500);
      const run = await call;
      expect(run.exitCode, run.stdout).to.equal(0);
      expect(backend.calls.map((c) => `${c.op} ${c.key}`)).to.deep.equal([
        'attach ctr-restart/eth0',
        'detach ctr-restart/eth0',
      ]);
      expect([...(await daemon.daemon.service.list())]).to.deep.equal([]);
    });

    it('takes the budget from the environment when the config sets none, and the config over it', async () => {
      const envOnly = await runShim(
        shim,
        { ...add, WORKLOADNET_CNI_CONNECT_RETRY_MS: '0' },
        cfg({ socket: sock }),
      );
      expect((JSON.parse(envOnly.stdout) as { msg: string }).msg).to.not.contain('waited');
      const both = await runShim(
        shim,
        { ...add, WORKLOADNET_CNI_CONNECT_RETRY_MS: '0' },
        cfg({ socket: sock, connectRetryMs: 200 }),
      );
      expect((JSON.parse(both.stdout) as { msg: string }).msg).to.match(/waited \d+ ms/);
    });

    it('refuses a malformed budget: code 7 in the config, code 4 in the environment', async () => {
      for (const bad of [-1, 1.5, '100', 4_000_000]) {
        const run = await runShim(shim, add, cfg({ socket: sock, connectRetryMs: bad }));
        expect(JSON.parse(run.stdout), String(bad)).to.include({ code: 7 });
      }
      const env = await runShim(
        shim,
        { ...add, WORKLOADNET_CNI_CONNECT_RETRY_MS: 'soon' },
        cfg({ socket: sock }),
      );
      expect(JSON.parse(env.stdout)).to.include({ code: 4 });
      expect((JSON.parse(env.stdout) as { msg: string }).msg).to.contain('WORKLOADNET_CNI_CONNECT_RETRY_MS');
    });
  });
});
