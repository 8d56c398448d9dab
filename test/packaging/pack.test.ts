import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

// `npm pack` must produce a package whose bin entries work: the CLI, the DPU simulator and the native
// CNI forwarder are all inside, and run from the unpacked package (dependencies linked from this
// checkout, since installing them again would only re-download what is here).

const ROOT = path.resolve(__dirname, '..', '..', '..');

describe('npm package', function () {
  this.timeout(120_000);
  let dir: string;
  let pkg: string;

  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-pack-'));
    // dist/ was just built by `npm test`; skip prepack's rebuild.
    const out = execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir, '--json'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    const [info] = JSON.parse(out) as Array<{ filename: string }>;
    execFileSync('tar', ['-xzf', path.join(dir, info?.filename ?? ''), '-C', dir]);
    pkg = path.join(dir, 'package');
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(pkg, 'node_modules'));
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('contains every bin entry as a node script with a shebang, and each one runs', () => {
    const bins = (
      JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')) as { bin: Record<string, string> }
    ).bin;
    expect(Object.keys(bins).sort()).to.deep.equal(['workloadnet', 'workloadnet-dpu-sim']);
    for (const [name, rel] of Object.entries(bins)) {
      const file = path.join(pkg, rel);
      expect(fs.readFileSync(file, 'utf8').startsWith('#!/usr/bin/env node'), `${name} shebang`).to.equal(
        true,
      );
      const help = execFileSync(process.execPath, [file, '--help'], { encoding: 'utf8' });
      expect(help, name).to.match(/Usage: /);
    }
  });

  it('ships the native CNI forwarder, which answers CNI error 50 when no daemon is reachable', () => {
    const shim = path.join(pkg, 'dist', 'bin', 'workloadnet-cni');
    expect(fs.statSync(shim).mode & 0o111, 'executable').to.not.equal(0);
    let out = '';
    try {
      execFileSync(shim, [], {
        input: JSON.stringify({
          cniVersion: '1.0.0',
          name: 'x',
          type: 'workloadnet',
          socket: path.join(dir, 'none.sock'),
        }),
        env: { CNI_COMMAND: 'STATUS', WORKLOADNET_CNI_STATUS_CONNECT_RETRY_MS: '0' },
        encoding: 'utf8',
      });
    } catch (err) {
      out = (err as { stdout: string }).stdout;
    }
    expect((JSON.parse(out) as { code: number }).code).to.equal(50);
  });

  it('ships the .proto contracts that server reflection reads at run time', () => {
    expect(fs.existsSync(path.join(pkg, 'proto', 'workloadnet', 'v1', 'workload.proto'))).to.equal(true);
  });
});
