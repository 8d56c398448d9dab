import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { checkStoreFile } from '../../core/store/store-file-check';
import { STORE_FILE } from '../../core/store/store-environment';
import { Store } from '../../core/store/store';
import { CLI } from '../support/daemon-process';
import { useNodeFixture } from '../support/node-fixture';
import { describeRoot } from '../support/describe-root';

// The real daemon on a damaged store: it exits 1 with the path and what is wrong, never by a signal
// (before the file check, a half-truncated file ended it with SIGBUS and zeroed meta pages with SIGSEGV).

function runDaemon(
  netns: string,
  dir: string,
): Promise<{ code: number | null; signal: string | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      'ip',
      [
        'netns',
        'exec',
        netns,
        process.execPath,
        CLI,
        'daemon',
        '--state-dir',
        path.join(dir, 'state'),
        '--socket',
        path.join(dir, 'api.sock'),
        '--cni-socket',
        path.join(dir, 'cni.sock'),
        '--log-level',
        'error',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    // A daemon that starts after all would serve forever: give up after a while and say so.
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stderr });
    });
  });
}

function storeCheck(dir: string): { code: number | null; stdout: string } {
  const r = spawnSync(process.execPath, [CLI, 'store', 'check', '--state-dir', path.join(dir, 'state')], {
    encoding: 'utf8',
  });
  return { code: r.status, stdout: r.stdout };
}

describeRoot('a damaged store (root, test-owned namespace)', function () {
  this.timeout(60_000);
  const fx = useNodeFixture({ prefix: 'wn-harden-', shape: 'bare' });
  let dir: string;
  let file: string;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-harden-damage-'));
    const s = Store.open(path.join(dir, 'state'));
    for (let i = 0; i < 200; i++) {
      await s.put({
        key: `w${i}/eth0`,
        workloadId: `w${i}`,
        ifName: 'eth0',
        netnsPath: `/var/run/netns/gone-${i}`,
        netnsInode: i + 1,
        ips: [
          {
            family: 4,
            address: `10.66.0.${i + 1}`,
            gateway: '169.254.1.1',
          },
        ],
        mtu: 1500,
        backend: 'linux',
        state: 'ready',
        createdAt: new Date(0).toISOString(),
      });
    }
    await s.close();
    file = path.join(dir, 'state', STORE_FILE);
    expect(storeCheck(dir).code, 'store check on the sound store').to.equal(0);
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  async function expectRefused(what: RegExp): Promise<void> {
    const r = await runDaemon(fx.node, dir);
    expect(r.signal, r.stderr).to.equal(null);
    expect(r.code, r.stderr).to.equal(1);
    expect(r.stderr).to.include(file).and.match(what);
    const check = storeCheck(dir);
    expect(check.code).to.equal(1);
    expect(check.stdout).to.include(file).and.match(what);
  }

  it('exits 1 naming the file when it is half-truncated', async () => {
    fs.truncateSync(file, Math.floor(fs.statSync(file).size / 2));
    await expectRefused(/is truncated/);
  });

  it('exits 1 naming the file when its meta pages are zeroed', async () => {
    const pageSize = checkStoreFile(file).meta!.pageSize;
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.alloc(2 * pageSize), 0, 2 * pageSize, 0);
    fs.closeSync(fd);
    await expectRefused(/meta page 0 is zeroed[;\s-]*meta page 1 is zeroed/);
  });

  it('exits 1 naming the file when a page of a tree is garbage', async () => {
    const { pageSize, mainRoot } = checkStoreFile(file).meta!;
    const fd = fs.openSync(file, 'r+');
    const garbage = Buffer.alloc(pageSize, 0xa5);
    fs.writeSync(fd, garbage, 0, pageSize, Number(mainRoot) * pageSize);
    fs.closeSync(fd);
    await expectRefused(new RegExp(`page ${mainRoot} of the main tree`));
  });

  it('store check exits 5 where there is no store', () => {
    fs.rmSync(path.join(dir, 'state'), { recursive: true });
    const r = storeCheck(dir);
    expect(r.code).to.equal(5);
    expect(r.stdout).to.match(/no store at/);
  });
});
