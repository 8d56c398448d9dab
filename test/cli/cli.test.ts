import { expect } from 'chai';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { expectHelpSnapshot, runCli, runCliAsync } from '../support/cli-run';
import { CLI } from '../support/daemon-process';
import { attachRequest } from '../support/attach-request';
import { recordingDaemon } from '../support/recording-daemon';
import { StandInNamespaces } from '../support/stand-in-netns';

// The real `workloadnet` binary against a running daemon (recording backend), through the public API.

describe('workloadnet CLI: help', () => {
  for (const cmd of [
    [],
    ['daemon'],
    ['status'],
    ['ls'],
    ['inspect'],
    ['detach'],
    ['gc'],
    ['install-cni'],
    ['config', 'check'],
    ['store', 'check'],
    ['version'],
    ['dpus'],
  ]) {
    const name = cmd.length ? cmd.join('-') : 'main';
    it(`prints the same --help for "${name}" as its snapshot, with examples`, () => expectHelpSnapshot(cmd));
  }

  it('exits 2 on an unknown command or flag', () => {
    expect(runCli(['frobnicate']).code).to.equal(2);
    expect(runCli(['status', '--no-such-flag']).code).to.equal(2);
  });

  it('exits 4 with a hint when the daemon is unreachable, with no empty "Resolution note:"', () => {
    const r = runCli(['status', '--socket', '/nonexistent/wn.sock', '--timeout', '2']);
    expect(r.code).to.equal(4);
    expect(r.stderr).to.include('cannot reach the daemon at /nonexistent/wn.sock: ');
    expect(r.stderr).to.include('ENOENT').and.include('Is it running?');
    expect(r.stderr).to.not.include('Resolution note');
  });

  it('refuses a --timeout that is not a number of seconds as a usage error (exit 2), naming it', () => {
    for (const t of ['abc', '0', '-1', '']) {
      const r = runCli(['status', '--socket', '/nonexistent/wn.sock', '--timeout', t]);
      expect(r.code, `--timeout "${t}"`).to.equal(2);
      expect(r.stderr).to.include(`"${t}" is not a number of seconds greater than 0`);
      expect(r.stderr).to.not.match(/DEADLINE|LB pick/);
    }
    expect(runCli(['cluster', 'blocks', '--timeout', 'abc']).code).to.equal(2);
  });

  it('status --json prints ready false and the error as JSON when the daemon is down (exit 4)', () => {
    const r = runCli(['status', '--json', '--socket', '/nonexistent/wn.sock', '--timeout', '2']);
    expect(r.code).to.equal(4);
    const st = JSON.parse(r.stdout) as { ready: boolean; reachable: boolean; error: string };
    expect(st).to.include({ ready: false, reachable: false });
    expect(st.error).to.include('cannot reach the daemon at /nonexistent/wn.sock');
  });

  it('exits quietly when the reader of its output goes away (EPIPE)', async () => {
    const child = spawn(process.execPath, [CLI, 'version', '--socket', '/nonexistent/wn.sock'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // Closing our end at once: the command's first write meets a closed pipe, as under `| head -0`.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(stderr).to.not.include('EPIPE');
    expect(code).to.equal(0);
  });
});

describe('workloadnet config check', () => {
  let dir: string;
  before(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-cfgcheck-'))));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, config: unknown): string => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, JSON.stringify(config));
    return file;
  };

  it('accepts a config the daemon would accept (exit 0) and says what it makes of it', () => {
    const file = write('ok.json', { podCidrs: ['10.77.0.0/24'], stateDir: path.join(dir, 'state') });
    const r = runCli(['config', 'check', '--config', file]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.include(`${file}: valid`).and.include('default (linux, 10.77.0.0/24)');
    expect(fs.existsSync(path.join(dir, 'state')), 'nothing started, no store made').to.equal(false);
  });

  for (const [name, config] of [
    ['a wrong logLevel', { logLevel: 'loud' }],
    ['an unknown key', { podCidr: ['10.77.0.0/24'] }],
    ['a bad MTU', { mtu: 12 }],
  ] as const) {
    it(`refuses ${name} with exit 2 and the daemon's own message`, () => {
      const file = write(`bad-${name.replace(/\W/g, '')}.json`, config);
      const r = runCli(['config', 'check', '--config', file]);
      expect(r.code).to.equal(2);
      const daemon = runCli(['daemon', '--config', file]);
      expect(daemon.code, 'the daemon refuses it too').to.equal(1);
      const message = daemon.stderr.replace(/^workloadnetd: /, '').trim();
      expect(message).to.not.equal('');
      expect(r.stderr.trim()).to.equal(`workloadnet: ${message}`);
    });
  }

  it('refuses a file it cannot read (exit 2)', () => {
    const r = runCli(['config', 'check', '--config', path.join(dir, 'absent.json')]);
    expect(r.code).to.equal(2);
    expect(r.stderr).to.include('cannot read config file');
  });
});

// The recording backend enters no namespace, so a stand-in serves.
describe('workloadnet CLI against a daemon (stand-in namespaces, no root needed)', () => {
  const namespaces = new StandInNamespaces();
  const rec = recordingDaemon({ netns: namespaces });
  let netnsPath: string;

  before(async () => {
    netnsPath = namespaces.add().path;
    for (const id of ['alpha', 'beta']) {
      const pod = { uid: 'u1', namespace: 'default', name: `pod-${id}` };
      await rec.daemon.client.call(
        rec.daemon.client.raw.attach,
        attachRequest(id, netnsPath, 'eth0', { pod }),
      );
    }
  });
  after(() => namespaces.cleanup());

  const sock = () => ['--socket', rec.daemon.config.socket];

  it('status prints a human summary and exits 0 when ready', async () => {
    const r = await runCliAsync(['status', ...sock()]);
    expect(r.code).to.equal(0);
    expect(r.stdout).to.match(/ready:\s+yes/);
    expect(r.stdout).to.match(/pool:\s+10\.77\.0\.0\/24 \(IPv4\) 2\/\d+ used/);
  });

  it('status --json prints the API shape and exits 3 when not ready', async () => {
    rec.backend.healthy = false;
    try {
      const r = await runCliAsync(['status', '--json', ...sock()]);
      expect(r.code).to.equal(3);
      const st = JSON.parse(r.stdout) as { ready: boolean; reasons: string[] };
      expect(st.ready).to.equal(false);
      expect(st.reasons).to.include('recording backend set unhealthy');
    } finally {
      rec.backend.healthy = true;
    }
  });

  it('ls prints a table of attachments and --json the same data', async () => {
    const r = await runCliAsync(['ls', ...sock()]);
    expect(r.code).to.equal(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).to.match(/^WORKLOAD\s+POD\s+INTERFACE\s+NETWORK\s+IPS\s+BACKEND\s+STATE\s+AGE$/);
    expect(
      lines
        .slice(1)
        .map((l) => l.split(/\s+/)[0])
        .sort(),
    ).to.deep.equal(['alpha', 'beta']);
    expect(r.stdout).to.include('default/pod-alpha');
    const j = JSON.parse((await runCliAsync(['ls', '--json', ...sock()])).stdout) as Array<{
      workloadId: string;
    }>;
    expect(j.map((a) => a.workloadId).sort()).to.deep.equal(['alpha', 'beta']);
  });

  it('inspect shows one workload and exits 5 for an unknown one', async () => {
    const r = await runCliAsync(['inspect', 'alpha', ...sock()]);
    expect(r.code).to.equal(0);
    expect(r.stdout).to.match(new RegExp(`netns:\\s+${netnsPath}\n`));
    expect(r.stdout).to.match(/pod:\s+default\/pod-alpha \(uid u1\)\n/);
    expect(r.stdout).to.match(/addresses:\s+10\.77\.0\.\d+\/32/);
    expect(r.stdout).to.match(/host side:\s+rec\d+\n/);
    expect(r.stdout).to.not.contain('Buffer');
    expect((await runCliAsync(['inspect', 'nobody', ...sock()])).code).to.equal(5);
  });

  it('inspect --json prints the API shape with addresses as text', async () => {
    const r = await runCliAsync(['inspect', 'alpha', '--json', ...sock()]);
    expect(r.code).to.equal(0);
    const [att] = JSON.parse(r.stdout) as Array<{
      netnsPath: string;
      result: { ip: unknown[]; ips: { cidr: string }[]; interfaces: { name: string; sandbox: string }[] };
    }>;
    expect(att?.netnsPath).to.equal(netnsPath);
    expect(att?.result.ip).to.deep.equal([att?.result.ips[0]?.cidr.split('/')[0]]);
    const host = att?.result.interfaces.find((i) => i.sandbox === '');
    expect(host?.name).to.match(/^rec\d+$/);
    expect(host).to.deep.include({ sandbox: '', mac: '', mtu: 1500 });
  });

  it('gc KEEP --dry-run says what would be detached and detaches nothing', async () => {
    const r = await runCliAsync(['gc', 'alpha', '--dry-run', '--json', ...sock()]);
    expect(r.code, r.stderr).to.equal(0);
    const res = JSON.parse(r.stdout) as { removed: Array<{ workloadId: string }>; dryRun: boolean };
    expect(res.removed.map((x) => x.workloadId)).to.deep.equal(['beta']);
    expect(res.dryRun).to.equal(true);
    const text = await runCliAsync(['gc', 'alpha/eth0', '--dry-run', ...sock()]);
    expect(text.stdout).to.equal('would detach 1 of 2 (nothing was detached): beta/eth0\n');
    const all = await runCliAsync(['gc', '--all', '--dry-run', ...sock()]);
    expect(all.stdout).to.match(
      /^would detach 2 of 2 .*: (alpha\/eth0 beta\/eth0|beta\/eth0 alpha\/eth0)\n$/,
    );
    const ls = JSON.parse((await runCliAsync(['ls', '--json', ...sock()])).stdout) as Array<{
      workloadId: string;
    }>;
    expect(ls.map((a) => a.workloadId).sort()).to.deep.equal(['alpha', 'beta']);
  });

  it('gc refuses an empty keep list without --all, then keeps only what is named', async () => {
    expect((await runCliAsync(['gc', ...sock()])).code).to.equal(2);
    const r = await runCliAsync(['gc', 'alpha', '--json', ...sock()]);
    expect(r.code).to.equal(0);
    expect(
      (JSON.parse(r.stdout) as { removed: Array<{ workloadId: string }> }).removed.map((x) => x.workloadId),
    ).to.deep.equal(['beta']);
  });

  it('detach removes a workload and succeeds again for an unknown one', async () => {
    expect((await runCliAsync(['detach', 'alpha', ...sock()])).code).to.equal(0);
    expect((await runCliAsync(['detach', 'alpha', ...sock()])).code).to.equal(0);
    expect(JSON.parse((await runCliAsync(['ls', '--json', ...sock()])).stdout)).to.deep.equal([]);
  });

  it('version prints client and daemon versions', async () => {
    const r = await runCliAsync(['version', '--json', ...sock()]);
    const v = JSON.parse(r.stdout) as { client: string; daemon: string };
    expect(v.client).to.match(/^\d+\.\d+\.\d+$/);
    expect(v.daemon).to.equal(v.client);
  });
});
