import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

// npm test's pretest step (packaging/ensure-test-packages.sh) and the forwarder's optional build. The
// machine's own packages cannot be removed for a test, so dpkg-query, apt-get and id are replaced by
// small scripts on PATH that play a Debian system with some packages missing; everything else is real.

const ROOT = path.resolve(__dirname, '..', '..', '..');
const SCRIPT = path.join(ROOT, 'packaging', 'ensure-test-packages.sh');
const LIST = path.join(ROOT, 'packaging', 'test-packages.txt');

const wanted = (): string[] =>
  fs
    .readFileSync(LIST, 'utf8')
    .split('\n')
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean);

describe('pretest: the Debian packages the tests need', () => {
  let dir: string;
  let bin: string;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnc-pkg-'));
    bin = path.join(dir, 'bin');
    fs.mkdirSync(bin);
    // The real tools the script uses, and nothing else from the system.
    for (const tool of ['sed', 'tr', 'grep', 'dirname', 'cat', 'sh']) {
      const real = spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
      fs.symlinkSync(real, path.join(bin, tool));
    }
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  function stub(name: string, body: string): void {
    fs.writeFileSync(path.join(bin, name), `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  }

  /** A Debian system where `installed` are installed; apt-get installs into the same list. */
  function debian(installed: string[], opts: { uid: number; apt: boolean }): void {
    fs.writeFileSync(path.join(dir, 'installed'), installed.map((p) => `${p}\n`).join(''));
    stub(
      'dpkg-query',
      `shift 2; rc=0; for p in "$@"; do if grep -qx "$p" "${dir}/installed"; then echo "$p installed"; else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi; done; exit $rc`,
    );
    stub('id', `echo ${opts.uid}`);
    if (opts.apt) {
      stub(
        'apt-get',
        `echo "$*" >> "${dir}/apt.log"; if [ "$1" = install ]; then for p in "$@"; do case "$p" in -*|install) ;; *) echo "$p" >> "${dir}/installed";; esac; done; fi`,
      );
    }
  }

  function run(env: Record<string, string> = {}) {
    const r = spawnSync('sh', [SCRIPT], { encoding: 'utf8', env: { PATH: bin, ...env } });
    const aptLog = path.join(dir, 'apt.log');
    return {
      code: r.status,
      stderr: r.stderr,
      apt: fs.existsSync(aptLog) ? fs.readFileSync(aptLog, 'utf8') : '',
    };
  }

  it('lists what the suites and .ci/run need, and .ci/run installs from the same list', () => {
    expect(wanted()).to.include.members(['containerd', 'gcc', 'iptables', 'etcd-server', 'etcd-client']);
    const ci = fs.readFileSync(path.join(ROOT, '.ci', 'run'), 'utf8');
    expect(ci).to.contain('packaging/test-packages.txt').and.contain('npm test');
    expect(JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts.pretest).to.contain(
      'ensure-test-packages.sh',
    );
  });

  it('is the pre-step of every script that runs suites or benchmarks, so none starts without its tools', () => {
    const scripts = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts as Record<
      string,
      string
    >;
    const runners = Object.keys(scripts).filter((name) =>
      /\bmocha\b|test\/bench\/run|test\/lanes\/run/.test(scripts[name] ?? ''),
    );
    expect(runners).to.include.members(['test', 'test:torture', 'bench']);
    for (const name of runners) {
      expect(scripts[`pre${name}`], `pre${name}`).to.contain('ensure-test-packages.sh');
    }
  });

  it('does nothing when every package is installed', () => {
    debian(wanted(), { uid: 0, apt: true });
    const r = run();
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stderr).to.equal('');
    expect(r.apt).to.equal('');
  });

  it('installs exactly the missing packages when run as root with apt-get', () => {
    debian(
      wanted().filter((p) => p !== 'iptables' && p !== 'etcd-server'),
      { uid: 0, apt: true },
    );
    const r = run();
    expect(r.code, r.stderr).to.equal(0);
    expect(r.apt).to.match(/^update/m);
    const install = r.apt.split('\n').find((l) => l.startsWith('install')) ?? '';
    expect(install.split(' ').filter((w) => !w.startsWith('-') && w !== 'install')).to.deep.equal([
      'iptables',
      'etcd-server',
    ]);
  });

  it('stops naming each missing package and the install command when not root', () => {
    debian(
      wanted().filter((p) => p !== 'containerd' && p !== 'gcc'),
      { uid: 1000, apt: true },
    );
    const r = run();
    expect(r.code).to.equal(1);
    expect(r.apt, 'apt-get not run').to.equal('');
    expect(r.stderr)
      .to.match(/^ {2}gcc$/m)
      .and.match(/^ {2}containerd$/m);
    expect(r.stderr).to.contain('apt-get install -y --no-install-recommends gcc containerd');
    expect(r.stderr).to.contain('ordinary user');
  });

  it('stops the same way as root when there is no apt-get', () => {
    debian(
      wanted().filter((p) => p !== 'runc'),
      { uid: 0, apt: false },
    );
    const r = run();
    expect(r.code).to.equal(1);
    expect(r.stderr)
      .to.match(/^ {2}runc$/m)
      .and.contain('no apt-get');
  });

  it('can be skipped on a machine that is not Debian', () => {
    const r = run();
    expect(r.code).to.equal(1);
    expect(r.stderr).to.contain('not a Debian system');
    expect(run({ WORKLOADNET_SKIP_PACKAGE_CHECK: '1' }).code).to.equal(0);
  });
});

describe('forwarder build without a C compiler', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnc-nocc-'));
    const bin = path.join(dir, 'bin');
    fs.mkdirSync(bin);
    for (const tool of ['dirname', 'mkdir', 'mv', 'chmod', 'rm']) {
      const real = spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
      fs.symlinkSync(real, path.join(bin, tool));
    }
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  const build = (args: string[]) =>
    spawnSync('/bin/sh', [path.join(ROOT, 'adapters', 'cni', 'shim', 'build.sh'), ...args], {
      encoding: 'utf8',
      env: { PATH: path.join(dir, 'bin') },
    });

  it('succeeds with --optional (npm run build), saying what is missing and building nothing', () => {
    const out = path.join(dir, 'out', 'workloadnet-cni');
    const r = build(['--optional', out]);
    expect(r.status, r.stderr).to.equal(0);
    expect(r.stderr).to.contain('no C compiler').and.contain('apt-get install gcc libc6-dev');
    expect(fs.existsSync(out)).to.equal(false);
  });

  it('fails without --optional', () => {
    const r = build([path.join(dir, 'out', 'workloadnet-cni')]);
    expect(r.status).to.equal(1);
    expect(r.stderr).to.contain('no C compiler');
  });
});
