import { expect } from 'chai';
import { execFile, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CLI } from '../support/daemon-process';
import { InProcessDaemon } from '../support/in-process-daemon';
import { attachRequest } from '../support/attach-request';
import { RecordingBackend } from '../support/recording-backend';
import { StandInNamespaces } from '../support/stand-in-netns';

// The real `workloadnet` binary against a running daemon (recording backend), through the public API.

const SNAPSHOTS = path.resolve(__dirname, '..', '..', '..', 'test', 'cli', 'snapshots');

function run(args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    env: { ...process.env, COLUMNS: '100' },
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** Asynchronous, so that a daemon in this same process can answer while the CLI runs. */
function runAsync(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

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
    ['store', 'check'],
    ['version'],
    ['dpus'],
  ]) {
    const name = cmd.length ? cmd.join('-') : 'main';
    it(`prints the same --help for "${name}" as its snapshot, with examples`, () => {
      const r = run([...cmd, '--help']);
      expect(r.code).to.equal(0);
      expect(r.stdout).to.include('Example');
      const file = path.join(SNAPSHOTS, `help-${name}.txt`);
      if (process.env.UPDATE_SNAPSHOTS === '1') fs.writeFileSync(file, r.stdout);
      expect(r.stdout).to.equal(fs.readFileSync(file, 'utf8'));
    });
  }

  it('exits 2 on an unknown command or flag', () => {
    expect(run(['frobnicate']).code).to.equal(2);
    expect(run(['status', '--no-such-flag']).code).to.equal(2);
  });

  it('exits 4 with a hint when the daemon is unreachable', () => {
    const r = run(['status', '--socket', '/nonexistent/wn.sock', '--timeout', '2']);
    expect(r.code).to.equal(4);
    expect(r.stderr).to.include('cannot reach the daemon');
  });
});

// The recording backend enters no namespace, so a stand-in serves.
describe('workloadnet CLI against a daemon (stand-in namespaces, no root needed)', () => {
  const namespaces = new StandInNamespaces();
  let d: InProcessDaemon;
  let backend: RecordingBackend;
  let netnsPath: string;

  before(async () => {
    netnsPath = namespaces.add().path;
    backend = new RecordingBackend();
    d = await InProcessDaemon.start(backend, {}, { netns: namespaces });
    for (const id of ['alpha', 'beta']) {
      const pod = { uid: 'u1', namespace: 'default', name: `pod-${id}` };
      await d.client.call(d.client.raw.attach, attachRequest(id, netnsPath, 'eth0', { pod }));
    }
  });
  after(async () => {
    await d.dispose();
    namespaces.cleanup();
  });

  const sock = () => ['--socket', d.config.socket];

  it('status prints a human summary and exits 0 when ready', async () => {
    const r = await runAsync(['status', ...sock()]);
    expect(r.code).to.equal(0);
    expect(r.stdout).to.match(/ready:\s+yes/);
    expect(r.stdout).to.match(/pool:\s+10\.77\.0\.0\/24 \(IPv4\) 2\/\d+ used/);
  });

  it('status --json prints the API shape and exits 3 when not ready', async () => {
    backend.healthy = false;
    try {
      const r = await runAsync(['status', '--json', ...sock()]);
      expect(r.code).to.equal(3);
      const st = JSON.parse(r.stdout) as { ready: boolean; reasons: string[] };
      expect(st.ready).to.equal(false);
      expect(st.reasons).to.include('recording backend set unhealthy');
    } finally {
      backend.healthy = true;
    }
  });

  it('ls prints a table of attachments and --json the same data', async () => {
    const r = await runAsync(['ls', ...sock()]);
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
    const j = JSON.parse((await runAsync(['ls', '--json', ...sock()])).stdout) as Array<{
      workloadId: string;
    }>;
    expect(j.map((a) => a.workloadId).sort()).to.deep.equal(['alpha', 'beta']);
  });

  it('inspect shows one workload and exits 5 for an unknown one', async () => {
    const r = await runAsync(['inspect', 'alpha', ...sock()]);
    expect(r.code).to.equal(0);
    expect(r.stdout).to.match(new RegExp(`netns:\\s+${netnsPath}\n`));
    expect(r.stdout).to.match(/pod:\s+default\/pod-alpha \(uid u1\)\n/);
    expect(r.stdout).to.match(/addresses:\s+10\.77\.0\.\d+\/32/);
    expect(r.stdout).to.match(/host side:\s+rec\d+\n/);
    expect(r.stdout).to.not.contain('Buffer');
    expect((await runAsync(['inspect', 'nobody', ...sock()])).code).to.equal(5);
  });

  it('inspect --json prints the API shape with addresses as text', async () => {
    const r = await runAsync(['inspect', 'alpha', '--json', ...sock()]);
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

  it('gc refuses an empty keep list without --all, then keeps only what is named', async () => {
    expect((await runAsync(['gc', ...sock()])).code).to.equal(2);
    const r = await runAsync(['gc', 'alpha', '--json', ...sock()]);
    expect(r.code).to.equal(0);
    expect(
      (JSON.parse(r.stdout) as { removed: Array<{ workloadId: string }> }).removed.map((x) => x.workloadId),
    ).to.deep.equal(['beta']);
  });

  it('detach removes a workload and succeeds again for an unknown one', async () => {
    expect((await runAsync(['detach', 'alpha', ...sock()])).code).to.equal(0);
    expect((await runAsync(['detach', 'alpha', ...sock()])).code).to.equal(0);
    expect(JSON.parse((await runAsync(['ls', '--json', ...sock()])).stdout)).to.deep.equal([]);
  });

  it('version prints client and daemon versions', async () => {
    const r = await runAsync(['version', '--json', ...sock()]);
    const v = JSON.parse(r.stdout) as { client: string; daemon: string };
    expect(v.client).to.match(/^\d+\.\d+\.\d+$/);
    expect(v.daemon).to.equal(v.client);
  });
});
