import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CniServer } from '../../../adapters/cni/cni-server';
import { WorkloadNetError } from '../../../core/errors';
import { postCni, type CniAnswer } from '../../support/cni-http';
import { rejection } from '../../support/expect-error';
import { recordingDaemon } from '../../support/recording-daemon';

// The socket's lifecycle and the HTTP envelope, spoken directly with Node's http client.

const request = (socketPath: string, method: string, urlPath: string, body = ''): Promise<CniAnswer> =>
  postCni(socketPath, body, { method, path: urlPath });

describe('CniServer', () => {
  let dir: string;
  let socketPath: string;
  const started: CniServer[] = [];
  // The real service behind every server here (an in-process daemon with the recording backend).
  const rd = recordingDaemon();

  beforeEach(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'wnc-srv-'));
    socketPath = path.join(dir, 'run', 'cni.sock');
  });

  afterEach(async () => {
    await Promise.all(started.splice(0).map((s) => s.close()));
    await fs.rm(dir, { recursive: true, force: true });
  });

  async function start(opts: { maxBodyBytes?: number } = {}): Promise<CniServer> {
    const server = new CniServer(rd.daemon.daemon.service, { socketPath, ...opts });
    await server.listen();
    started.push(server);
    return server;
  }

  /** A CNI VERSION call, which every server answers without touching the service. */
  const askVersion = (stdin: string): Promise<CniAnswer> =>
    request(socketPath, 'POST', '/v1/cni', JSON.stringify({ env: { CNI_COMMAND: 'VERSION' }, stdin }));

  /** Nothing reached the service's state: no dataplane call, no attachment. */
  async function expectUntouched(): Promise<void> {
    expect(rd.backend.calls).to.deep.equal([]);
    expect([...(await rd.daemon.daemon.service.list())]).to.deep.equal([]);
  }

  it('creates the socket with mode 0660 in a folder it creates', async () => {
    await start();
    const st = await fs.lstat(socketPath);
    expect(st.isSocket()).to.equal(true);
    expect(st.mode & 0o777).to.equal(0o660);
  });

  it('refuses to start while a live server holds the socket', async () => {
    await start();
    const second = new CniServer(rd.daemon.daemon.service, { socketPath });
    const caught = await rejection(second.listen(), 'FAILED_PRECONDITION');
    expect(caught).to.be.instanceOf(WorkloadNetError);
    expect(caught.message).to.contain(socketPath);
    // The first server still answers.
    const answer = await askVersion('');
    expect(answer.exitCode).to.equal('0');
  });

  it('replaces a stale socket left by a daemon that died', async () => {
    await fs.mkdir(path.dirname(socketPath), { recursive: true });
    // A process that binds the socket and is killed leaves the file behind, as a crashed daemon does.
    const child = spawn(process.execPath, [
      '-e',
      `require('net').createServer().listen(${JSON.stringify(socketPath)}, () => console.log('up'))`,
    ]);
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    expect((await fs.lstat(socketPath)).isSocket()).to.equal(true);

    await start();
    const answer = await askVersion('');
    expect(answer.status).to.equal(200);
    expect(answer.exitCode).to.equal('0');
  });

  it('refuses to remove a path that is not a socket', async () => {
    await fs.mkdir(path.dirname(socketPath), { recursive: true });
    await fs.writeFile(socketPath, 'precious');
    const server = new CniServer(rd.daemon.daemon.service, { socketPath });
    await rejection(server.listen(), 'FAILED_PRECONDITION');
    expect(await fs.readFile(socketPath, 'utf8')).to.equal('precious');
  });

  it('removes its socket on close', async () => {
    const server = await start();
    await server.close();
    started.splice(0);
    let code: string | undefined;
    try {
      await fs.lstat(socketPath);
    } catch (err) {
      code = (err as NodeJS.ErrnoException).code;
    }
    expect(code).to.equal('ENOENT');
  });

  it('answers 200 with X-CNI-Exit-Code and the CNI output as the body', async () => {
    await start();
    const answer = await askVersion('{}');
    expect(answer.status).to.equal(200);
    expect(answer.contentType).to.equal('application/json');
    expect(answer.exitCode).to.equal('0');
    expect(JSON.parse(answer.body)).to.have.property('supportedVersions');
  });

  it('answers an unknown path with 404 and CNI error JSON the forwarder can print', async () => {
    await start();
    const answer = await request(socketPath, 'POST', '/v2/other', '{}');
    expect(answer.status).to.equal(404);
    expect(answer.exitCode).to.equal('1');
    expect(JSON.parse(answer.body)).to.include({ code: 999 });
  });

  it('answers a GET with 405', async () => {
    await start();
    const answer = await request(socketPath, 'GET', '/v1/cni');
    expect(answer.status).to.equal(405);
    expect(answer.exitCode).to.equal('1');
  });

  it('answers a malformed envelope with CNI error 6', async () => {
    await start();
    for (const body of [
      'not json',
      '[1]',
      '{"env":{"CNI_COMMAND":5}}',
      '{"env":{"CNI_COMMAND":"ADD"},"stdin":{}}',
    ]) {
      const answer = await request(socketPath, 'POST', '/v1/cni', body);
      expect(answer.exitCode, body).to.equal('1');
      expect(JSON.parse(answer.body), body).to.include({ code: 6 });
    }
    await expectUntouched();
  });

  it('reads and refuses a body over maxBodyBytes with error 6, before parsing it', async () => {
    await start({ maxBodyBytes: 1024 });
    const envelope = JSON.stringify({ env: { CNI_COMMAND: 'VERSION' }, stdin: 'x'.repeat(4096) });
    const answer = await request(socketPath, 'POST', '/v1/cni', envelope);
    expect(answer.exitCode).to.equal('1');
    expect(JSON.parse(answer.body)).to.include({ code: 6 });
    await expectUntouched();
  });
});
