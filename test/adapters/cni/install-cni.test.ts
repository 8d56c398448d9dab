import { expect } from 'chai';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CniServer } from '../../../adapters/cni/cni-server';
import { restoreMovedAside, runtimeConfigs } from '../../../adapters/cni/conf-dir';
import {
  installCni,
  parseChain,
  type InstallCniOptions,
  type InstalledCni,
} from '../../../adapters/cni/install';
import { rejection } from '../../support/expect-error';
import { buildShim, runShim } from '../../support/cni-harness';
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

  /** Installs network wnc-pods into this test's directories, without force; `over` changes any of it. */
  const install = (over: Partial<InstallCniOptions> = {}): Promise<InstalledCni> =>
    installCni({ binDir, confDir, cniSocket, name: 'wnc-pods', force: false, shimPath, ...over });

  it('installs the forwarder as "workloadnet" and a conflist that names it and the socket', async () => {
    const out = await install({ mtu: 1450 });
    expect(out.binary).to.equal(path.join(binDir, 'workloadnet'));
    expect(out.conflist).to.equal(path.join(confDir, '05-wnc-pods.conflist'));

    const bin = await fs.stat(out.binary);
    expect(bin.mode & 0o777).to.equal(0o755);
    expect(await fs.readFile(out.binary)).to.deep.equal(await fs.readFile(shimPath));

    const list = JSON.parse(await fs.readFile(out.conflist, 'utf8')) as {
      cniVersion: string;
      cniVersions: string[];
      name: string;
      plugins: Record<string, unknown>[];
    };
    // 1.0.0 for a libcni before 1.2 (containerd 1.6/1.7), which fails on a 1.1.0 result; 1.1.0, with
    // STATUS and GC, for a libcni that reads cniVersions.
    expect(list.cniVersion).to.equal('1.0.0');
    expect(list.cniVersions).to.deep.equal(['1.0.0', '1.1.0']);
    expect(out.cniVersions).to.deep.equal(['1.0.0', '1.1.0']);
    expect(list.name).to.equal('wnc-pods');
    expect(list.plugins).to.have.length(1);
    expect(list.plugins[0]).to.include({ type: 'workloadnet', socket: cniSocket, mtu: 1450 });
    expect((await fs.readdir(confDir)).filter((f) => f.endsWith('.tmp'))).to.deep.equal([]);
  });

  it('writes a secondary network as 90-<name>.conflist, named after the network it selects', async () => {
    const out = await install({ name: 'fast', secondary: true });
    expect(out.conflist).to.equal(path.join(confDir, '90-fast.conflist'));
    const list = JSON.parse(await fs.readFile(out.conflist, 'utf8')) as { name: string };
    expect(list.name).to.equal('fast');
    const primary = await install({ name: 'default' });
    // A runtime takes the first conflist by name as its pod network: the default one sorts first.
    expect((await fs.readdir(confDir)).sort()[0]).to.equal(path.basename(primary.conflist));
  });

  it('overwrites its own files on a second run without force', async () => {
    await install();
    const out = await install({ cniSocket: '/run/other/cni.sock' });
    const list = JSON.parse(await fs.readFile(out.conflist, 'utf8')) as { plugins: { socket: string }[] };
    expect(list.plugins[0]?.socket).to.equal('/run/other/cni.sock');
  });

  it('refuses to overwrite a conflist it did not write, and leaves both files untouched', async () => {
    await fs.mkdir(confDir, { recursive: true });
    const foreign = path.join(confDir, '05-wnc-pods.conflist');
    await fs.writeFile(foreign, '{"cniVersion":"1.0.0","name":"wnc-pods","plugins":[{"type":"bridge"}]}');
    const err = await rejection(install());
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
    const err = await rejection(install());
    expect(err.code).to.equal('ALREADY_EXISTS');
    expect(await fs.readFile(path.join(binDir, 'workloadnet'), 'utf8')).to.contain('someone else');
  });

  it('overwrites foreign files when forced', async () => {
    await fs.mkdir(confDir, { recursive: true });
    await fs.mkdir(binDir, { recursive: true });
    await fs.writeFile(path.join(confDir, '05-wnc-pods.conflist'), 'not even json');
    await fs.writeFile(path.join(binDir, 'workloadnet'), 'foreign');
    const out = await install({ force: true });
    expect(JSON.parse(await fs.readFile(out.conflist, 'utf8'))).to.have.property('plugins');
    expect(await fs.readFile(out.binary)).to.deep.equal(await fs.readFile(shimPath));
  });

  it('refuses a network name CNI would refuse, and a shim that is not the forwarder', async () => {
    expect((await rejection(install({ name: 'bad name' }))).code).to.equal('INVALID_ARGUMENT');
    const notShim = path.join(dir, 'not-a-shim');
    await fs.writeFile(notShim, 'hello');
    expect((await rejection(install({ name: 'wnc', shimPath: notShim }))).code).to.equal('INVALID_ARGUMENT');
  });

  it('produces a plugin that reaches the daemon through the socket named in the conflist', async () => {
    const socketPath = path.join(dir, 'inst.sock');
    const daemon = await InProcessDaemon.start(new RecordingBackend());
    const server = new CniServer(daemon.daemon.service, { socketPath });
    await server.listen();
    try {
      const out = await install({ cniSocket: socketPath });
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

  describe("beside another plugin's config", () => {
    const FLANNEL = '{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel"}]}\n';
    const flannel = (): string => path.join(confDir, '10-flannel.conflist');
    const installWorkloadnet = (extra: Partial<InstallCniOptions> = {}): Promise<InstalledCni> =>
      install({ name: 'workloadnet', ...extra });

    beforeEach(async () => {
      await fs.mkdir(confDir, { recursive: true });
      await fs.writeFile(flannel(), FLANNEL);
    });

    it('sorts first and moves the other config aside, content intact, saying so', async () => {
      const out = await installWorkloadnet();
      expect(path.basename(out.conflist)).to.equal('05-workloadnet.conflist');
      expect(await runtimeConfigs(confDir), 'what a runtime reads').to.deep.equal([
        '05-workloadnet.conflist',
      ]);
      expect(out.movedAside).to.deep.equal([{ from: flannel(), to: `${flannel()}.workloadnet-disabled` }]);
      expect(await fs.readFile(`${flannel()}.workloadnet-disabled`, 'utf8')).to.equal(FLANNEL);
    });

    it('keeps the other config with keepOthers, and names one that still sorts before ours', async () => {
      await fs.writeFile(path.join(confDir, '00-multus.conf'), '{"name":"multus","type":"multus"}');
      const out = await installWorkloadnet({ keepOthers: true });
      expect(out.movedAside).to.deep.equal([]);
      expect(await fs.readFile(flannel(), 'utf8')).to.equal(FLANNEL);
      expect(out.shadowedBy).to.deep.equal([path.join(confDir, '00-multus.conf')]);
      expect((await runtimeConfigs(confDir))[1]).to.equal('05-workloadnet.conflist');
    });

    it('moves nothing for a secondary network, which must not become the default', async () => {
      const out = await installWorkloadnet({ name: 'fast', secondary: true });
      expect(out.movedAside).to.deep.equal([]);
      expect(await runtimeConfigs(confDir)).to.deep.equal(['10-flannel.conflist', '90-fast.conflist']);
    });

    it('removes an older conflist of ours for the same network, and keeps ours for another', async () => {
      const fast = await installWorkloadnet({ name: 'fast', secondary: true });
      const first = await installWorkloadnet({ keepOthers: true });
      const older = path.join(confDir, '10-workloadnet.conflist');
      await fs.rename(first.conflist, older);
      const out = await installWorkloadnet({ keepOthers: true });
      expect(out.superseded).to.deep.equal([older]);
      expect(await runtimeConfigs(confDir)).to.deep.equal([
        '05-workloadnet.conflist',
        '10-flannel.conflist',
        path.basename(fast.conflist),
      ]);
    });

    it('restores what it moved aside, unless a file of that name came back', async () => {
      await installWorkloadnet();
      await fs.writeFile(path.join(confDir, '20-other.conf'), 'x');
      await installWorkloadnet();
      await fs.writeFile(path.join(confDir, '20-other.conf'), 'newer');
      const res = await restoreMovedAside(confDir);
      expect(res.restored.map((r) => path.basename(r.to))).to.deep.equal(['10-flannel.conflist']);
      expect(res.kept).to.deep.equal([path.join(confDir, '20-other.conf.workloadnet-disabled')]);
      expect(await fs.readFile(flannel(), 'utf8')).to.equal(FLANNEL);
      expect(await fs.readFile(path.join(confDir, '20-other.conf'), 'utf8')).to.equal('newer');
    });
  });

  describe('chained plugins', () => {
    /** A plugin that answers CNI VERSION with `versions`. */
    async function fakePlugin(
      name: string,
      mode = 0o755,
      versions = ['0.4.0', '1.0.0', '1.1.0'],
      dir = binDir,
    ): Promise<void> {
      await fs.mkdir(dir, { recursive: true });
      const answer = JSON.stringify({ cniVersion: '1.0.0', supportedVersions: versions });
      await fs.writeFile(path.join(dir, name), `#!/bin/sh\necho '${answer}'\n`, { mode });
      await fs.chmod(path.join(dir, name), mode);
    }
    const read = async (file: string) =>
      JSON.parse(await fs.readFile(file, 'utf8')) as {
        cniVersion: string;
        cniVersions?: string[];
        plugins: Record<string, unknown>[];
      };

    it('offers 1.1.0 only when every chained plugin speaks it, and says which one does not', async () => {
      await fakePlugin('portmap');
      await fakePlugin('bandwidth', 0o755, ['0.3.1', '0.4.0', '1.0.0']);
      const out = await install({ chain: parseChain('portmap,bandwidth') });
      const list = await read(out.conflist);
      expect(list.cniVersion).to.equal('1.0.0');
      expect(list.cniVersions, 'a 1.1.0 list would fail in bandwidth').to.equal(undefined);
      expect(out.versionNote).to.contain(path.join(binDir, 'bandwidth')).and.contain('1.0.0 only');
      await fakePlugin('bandwidth');
      const again = await install({ chain: parseChain('portmap,bandwidth') });
      expect((await read(again.conflist)).cniVersions).to.deep.equal(['1.0.0', '1.1.0']);
    });

    it('copies a chained plugin from pluginsFrom only when the bin dir has none', async () => {
      const from = path.join(path.dirname(binDir), 'image-plugins');
      await fakePlugin('portmap', 0o755, ['1.0.0'], from);
      await fakePlugin('bandwidth', 0o755, ['1.0.0'], from);
      await fakePlugin('bandwidth'); // the node's own, newer
      const out = await install({ chain: parseChain('portmap,bandwidth'), pluginsFrom: from });
      expect(out.copiedPlugins).to.deep.equal([path.join(binDir, 'portmap')]);
      expect(await fs.readFile(path.join(binDir, 'portmap'))).to.deep.equal(
        await fs.readFile(path.join(from, 'portmap')),
      );
      expect(await fs.readFile(path.join(binDir, 'bandwidth'), 'utf8')).to.contain('1.1.0');
    });

    it('writes portmap and bandwidth after workloadnet, each declaring the capability it applies', async () => {
      await fakePlugin('portmap');
      await fakePlugin('bandwidth');
      const chain = parseChain('portmap,bandwidth');
      const out = await install({ chain });
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
      const err = await rejection(install({ name: 'n', chain: ['portmap'] }));
      expect(err.message).to.contain('not executable');
    });

    it('refuses plugins it does not know how to chain, and names given twice', () => {
      expect(() => parseChain('portmap,tuning')).to.throw(/cannot chain "tuning"/);
      expect(() => parseChain('portmap,portmap')).to.throw(/twice/);
      expect(parseChain('')).to.deep.equal([]);
    });
  });

  it('says what is missing when the forwarder was never built (no C compiler)', async () => {
    const err = await rejection(install({ name: 'n', shimPath: path.join(dir, 'absent') }));
    expect(err.code).to.equal('FAILED_PRECONDITION');
    expect(err.message).to.contain('C compiler').and.contain('gcc').and.contain('npm run build');
  });
});
