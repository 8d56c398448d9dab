import { expect } from 'chai';
import { promises as fs } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { CniServer } from '../../../adapters/cni/cni-server';
import { buildShim, runShim } from './cni-harness';
import { FakeWorkloadService } from './fake-workload-service';

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

  const version = { CNI_COMMAND: 'VERSION' };

  it('answers CNI error 50 naming the socket when no daemon listens', async () => {
    const missing = path.join(dir, 'nobody-here.sock');
    const run = await runShim(shim, version, JSON.stringify({ cniVersion: '1.0.0', socket: missing }));
    expect(run.exitCode).to.equal(1);
    const err = JSON.parse(run.stdout) as Record<string, unknown>;
    expect(err).to.include({ code: 50, cniVersion: '1.0.0' });
    expect(err.msg).to.contain(missing).and.contain('No such file or directory');
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
        { ...version, WORKLOADNET_CNI_TIMEOUT_MS: '400' },
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
    const run = await runShim(shim, version, JSON.stringify({ socket: rude }));
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
    const run = await runShim(shim, version, JSON.stringify({ socket: scripted }));
    expect(run.exitCode).to.equal(7);
    expect(run.stdout).to.equal('{"hello":"world"}');
  });

  it('refuses an answer without X-CNI-Exit-Code instead of guessing success', async () => {
    const other = await rawServer('other.sock', (c) =>
      c.once('data', () => c.end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}')),
    );
    const run = await runShim(shim, version, JSON.stringify({ socket: other }));
    expect(run.exitCode).to.equal(1);
    expect(JSON.parse(run.stdout)).to.include({ code: 999 });
  });

  describe('socket selection', () => {
    let fake: FakeWorkloadService;
    let server: CniServer;
    let real: string;

    beforeEach(async () => {
      fake = new FakeWorkloadService();
      real = path.join(dir, 'daemon.sock');
      server = new CniServer(fake, { socketPath: real });
      await server.listen();
    });

    afterEach(async () => {
      await server.close();
    });

    it('uses WORKLOADNET_CNI_SOCKET when the config has no "socket" field', async () => {
      const run = await runShim(shim, { ...version, WORKLOADNET_CNI_SOCKET: real }, '{"cniVersion":"1.0.0"}');
      expect(run.exitCode, run.stdout).to.equal(0);
      expect(JSON.parse(run.stdout)).to.have.property('supportedVersions');
    });

    it('prefers the config\'s top-level "socket" over the environment', async () => {
      const wrong = path.join(dir, 'wrong.sock');
      const run = await runShim(
        shim,
        { ...version, WORKLOADNET_CNI_SOCKET: wrong },
        JSON.stringify({ socket: real }),
      );
      expect(run.exitCode, run.stdout).to.equal(0);
    });

    it('ignores a "socket" key nested inside prevResult or runtimeConfig', async () => {
      const decoy = path.join(dir, 'decoy.sock');
      const stdin = JSON.stringify({
        cniVersion: '1.0.0',
        prevResult: { socket: decoy, interfaces: [{ name: 'x', socketPath: decoy }] },
        runtimeConfig: { socket: decoy },
        args: ['{"socket":', decoy],
        socket: real,
      });
      const run = await runShim(shim, version, stdin);
      expect(run.exitCode, run.stdout).to.equal(0);
    });

    it('decodes JSON escapes in the "socket" value', async () => {
      const escaped =
        JSON.stringify({ cniVersion: '1.0.0' }).slice(0, -1) +
        `,"socket":"${real.replace(/\//g, '\\/').replace('daemon', '\\u0064aemon')}"}`;
      const run = await runShim(shim, version, escaped);
      expect(run.exitCode, run.stdout).to.equal(0);
    });

    it('answers 50 rather than falling back when "socket" is longer than a unix socket path allows', async () => {
      const run = await runShim(
        shim,
        { ...version, WORKLOADNET_CNI_SOCKET: real },
        JSON.stringify({ socket: `/${'s'.repeat(300)}` }),
      );
      expect(run.exitCode).to.equal(1);
      expect(JSON.parse(run.stdout)).to.include({ code: 50 });
    });
  });
});
