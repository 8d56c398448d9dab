import { expect } from 'chai';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CniServer } from '../../../adapters/cni/cni-server';
import { installCni, parseChain } from '../../../adapters/cni/install';
import { rejection } from '../../support/expect-error';
import { buildShim, runShim } from './cni-harness';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';

describe('installCni', function () {
  this.timeout(20000);

  let dir: string;
  let shimPath: string;
  let binDir: string;
  let confDir: string;
  const cniSocket = '/run/workloadnet/cni.sock';

  before(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'wnc-inst-'));
    shimPath = await buildShim(path.join(dir, 'build'));
  });

  after(async () => {
    await fs.rm(dir, { recursive: true, force: true });
  });

  beforeEach(async () => {
    const case_ = await fs.mkdtemp(path.join(dir, 'case-'));
    binDir = path.join(case_, 'opt', 'cni', 'bin');
    confDir = path.join(case_, 'etc', 'cni', 'net.d');
  });

  it('installs the forwarder as "workloadnet" and a conflist that names it and the socket', async () => {
    const out = await installCni({
      binDir,
      confDir,
      cniSocket,
      name: 'wnc-pods',
      force: false,
      shimPath,
      mtu: 1450,
    });
    expect(out.binary).to.equal(path.join(binDir, 'workloadnet'));
    expect(out.conflist).to.equal(path.join(confDir, '10-wnc-pods.conflist'));

    const bin = await fs.stat(out.binary);
    expect(bin.mode & 0o777).to.equal(0o755);
    expect(await fs.readFile(out.binary)).to.deep.equal(await fs.readFile(shimPath));

    const list = JSON.parse(await fs.readFile(out.conflist, 'utf8')) as {
      cniVersion: string;
      name: string;
      plugins: Record<string, unknown>[];
    };
    expect(list.cniVersion).to.equal('1.0.0');
    expect(list.name).to.equal('wnc-pods');
    expect(list.plugins).to.have.length(1);
    expect(list.plugins[0]).to.include({ type: 'workloadnet', socket: cniSocket, mtu: 1450 });
    expect((await fs.readdir(confDir)).filter((f) => f.endsWith('.tmp'))).to.deep.equal([]);
  });

  it('writes a secondary network as 90-<name>.conflist, named after the network it selects', async () => {
    const out = await installCni({
      binDir,
      confDir,
      cniSocket,
      name: 'fast',
      secondary: true,
      force: false,
      shimPath,
    });
    expect(out.conflist).to.equal(path.join(confDir, '90-fast.conflist'));
    const list = JSON.parse(await fs.readFile(out.conflist, 'utf8')) as { name: string };
    expect(list.name).to.equal('fast');
    const primary = await installCni({ binDir, confDir, cniSocket, name: 'default', force: false, shimPath });
    // A runtime takes the first conflist by name as its pod network: the default one sorts first.
    expect((await fs.readdir(confDir)).sort()[0]).to.equal(path.basename(primary.conflist));
  });

  it('overwrites its own files on a second run without force', async () => {
    await installCni({ binDir, confDir, cniSocket, name: 'wnc-pods', force: false, shimPath });
    const out = await installCni({
      binDir,
      confDir,
      cniSocket: '/run/other/cni.sock',
      name: 'wnc-pods',
      force: false,
      shimPath,
    });
    const list = JSON.parse(await fs.readFile(out.conflist, 'utf8')) as { plugins: { socket: string }[] };
    expect(list.plugins[0]?.socket).to.equal('/run/other/cni.sock');
  });

  it('refuses to overwrite a conflist it did not write, and leaves both files untouched', async () => {
    await fs.mkdir(confDir, { recursive: true });
    const foreign = path.join(confDir, '10-wnc-pods.conflist');
    await fs.writeFile(foreign, '{"cniVersion":"1.0.0","name":"wnc-pods","plugins":[{"type":"bridge"}]}');
    const err = await rejection(
      installCni({ binDir, confDir, cniSocket, name: 'wnc-pods', force: false, shimPath }),
    );
    expect(err.code).to.equal('ALREADY_EXISTS');
    expect(err.message).to.contain(foreign).and.contain('force');
    expect(await fs.readFile(foreign, 'utf8')).to.contain('bridge');
    let binCode: string | undefined;
    await fs.stat(path.join(binDir, 'workloadnet')).catch((e: NodeJS.ErrnoException) => (binCode = e.code));
    expect(binCode, 'binary not installed after a refusal').to.equal('ENOENT');
  });

  it('refuses to overwrite a foreign "workloadnet" binary without force', async () => {
    await fs.mkdir(binDir, { recursive: true });
    await fs.writeFile(path.join(binDir, 'workloadnet'), '#!/bin/sh\necho someone else\n', { mode: 0o755 });
    const err = await rejection(
      installCni({ binDir, confDir, cniSocket, name: 'wnc-pods', force: false, shimPath }),
    );
    expect(err.code).to.equal('ALREADY_EXISTS');
    expect(await fs.readFile(path.join(binDir, 'workloadnet'), 'utf8')).to.contain('someone else');
  });

  it('overwrites foreign files when forced', async () => {
    await fs.mkdir(confDir, { recursive: true });
    await fs.mkdir(binDir, { recursive: true });
    await fs.writeFile(path.join(confDir, '10-wnc-pods.conflist'), 'not even json');
    await fs.writeFile(path.join(binDir, 'workloadnet'), 'foreign');
    const out = await installCni({ binDir, confDir, cniSocket, name: 'wnc-pods', force: true, shimPath });
    expect(JSON.parse(await fs.readFile(out.conflist, 'utf8'))).to.have.property('plugins');
    expect(await fs.readFile(out.binary)).to.deep.equal(await fs.readFile(shimPath));
  });

  it('refuses a network name CNI would refuse, and a shim that is not the forwarder', async () => {
    expect(
      (await rejection(installCni({ binDir, confDir, cniSocket, name: 'bad name', force: false, shimPath })))
        .code,
    ).to.equal('INVALID_ARGUMENT');
    const notShim = path.join(dir, 'not-a-shim');
    await fs.writeFile(notShim, 'hello');
    expect(
      (
        await rejection(
          installCni({ binDir, confDir, cniSocket, name: 'wnc', force: false, shimPath: notShim }),
        )
      ).code,
    ).to.equal('INVALID_ARGUMENT');
  });

  it('produces a plugin that reaches the daemon through the socket named in the conflist', async () => {
    const socketPath = path.join(dir, 'inst.sock');
    const daemon = await InProcessDaemon.start(new RecordingBackend());
    const server = new CniServer(daemon.daemon.service, { socketPath });
    await server.listen();
    try {
      const out = await installCni({
        binDir,
        confDir,
        cniSocket: socketPath,
        name: 'wnc-pods',
        force: false,
        shimPath,
      });
      const list = JSON.parse(await fs.readFile(out.conflist, 'utf8')) as {
        cniVersion: string;
        name: string;
        plugins: Record<string, unknown>[];
      };
      // What a runtime sends: the plugin entry plus cniVersion and name.
      const stdin = JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...list.plugins[0] });
      const run = await runShim(out.binary, { CNI_COMMAND: 'VERSION' }, stdin);
      expect(run.exitCode, run.stdout).to.equal(0);
      expect(JSON.parse(run.stdout)).to.have.property('supportedVersions');
    } finally {
      await server.close();
      await daemon.dispose();
    }
  });

  describe('chained plugins', () => {
    async function fakePlugin(name: string, mode = 0o755): Promise<void> {
      await fs.mkdir(binDir, { recursive: true });
      await fs.writeFile(path.join(binDir, name), '#!/bin/sh\n', { mode });
      await fs.chmod(path.join(binDir, name), mode);
    }
    const read = async (file: string) =>
      JSON.parse(await fs.readFile(file, 'utf8')) as { plugins: Record<string, unknown>[] };

    it('writes portmap and bandwidth after workloadnet, each declaring the capability it applies', async () => {
      await fakePlugin('portmap');
      await fakePlugin('bandwidth');
      const chain = parseChain('portmap,bandwidth');
      const out = await installCni({
        binDir,
        confDir,
        cniSocket,
        name: 'wnc-pods',
        force: false,
        shimPath,
        chain,
      });
      const { plugins } = await read(out.conflist);
      expect(plugins.map((p) => p.type)).to.deep.equal(['workloadnet', 'portmap', 'bandwidth']);
      expect(plugins[0]?.capabilities).to.deep.equal({ dns: true });
      expect(plugins[1]?.capabilities).to.deep.equal({ portMappings: true });
      expect(plugins[2]?.capabilities).to.deep.equal({ bandwidth: true });
    });

    it('refuses a chained plugin missing from the bin dir and writes nothing, unless forced', async () => {
      await fakePlugin('portmap');
      const opts = {
        binDir,
        confDir,
        cniSocket,
        name: 'wnc-pods',
        shimPath,
        chain: parseChain('portmap,bandwidth'),
      };
      const err = await rejection(installCni({ ...opts, force: false }));
      expect(err.code).to.equal('FAILED_PRECONDITION');
      expect(err.message)
        .to.contain(path.join(binDir, 'bandwidth'))
        .and.contain('containernetworking-plugins');
      expect(await fs.readdir(binDir)).to.deep.equal(['portmap']);
      await fs.access(confDir).then(
        async () => expect(await fs.readdir(confDir)).to.deep.equal([]),
        () => undefined,
      );
      const forced = await installCni({ ...opts, force: true });
      expect((await read(forced.conflist)).plugins).to.have.length(3);
    });

    it('refuses a chained plugin that is not executable', async () => {
      await fakePlugin('portmap', 0o644);
      const err = await rejection(
        installCni({ binDir, confDir, cniSocket, name: 'n', force: false, shimPath, chain: ['portmap'] }),
      );
      expect(err.message).to.contain('not executable');
    });

    it('refuses plugins it does not know how to chain, and names given twice', () => {
      expect(() => parseChain('portmap,tuning')).to.throw(/cannot chain "tuning"/);
      expect(() => parseChain('portmap,portmap')).to.throw(/twice/);
      expect(parseChain('')).to.deep.equal([]);
    });
  });

  it('says what is missing when the forwarder was never built (no C compiler)', async () => {
    const err = await rejection(
      installCni({ binDir, confDir, cniSocket, name: 'n', force: false, shimPath: path.join(dir, 'absent') }),
    );
    expect(err.code).to.equal('FAILED_PRECONDITION');
    expect(err.message).to.contain('C compiler').and.contain('gcc').and.contain('npm run build');
  });
});
