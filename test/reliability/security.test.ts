import { expect } from 'chai';
import { execFile, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { DEFAULT_CONFIG } from '../../core/config';
import { SEED_SERVICE } from '../../core/serve/api-server';
import { AttachRequest } from '../../proto/gen/workloadnet/v1/workload';
import { daemonCommand, DaemonProcess } from '../support/daemon-process';
import { attachRequest } from '../support/attach-request';
import { describeRoot } from '../support/describe-root';
import { useNodeFixture } from '../support/node-fixture';
import { cniEnvelope, parseCniError, postCni } from '../support/cni-http';
import { codeName, outcome } from '../support/grpc-outcome';
import { hostLinksInGroup } from '../support/kernel-view';
import { makeTestPki, type TestPki } from '../support/pki';
import { TLS_PROBE_MAIN, type ProbeResult } from './tls-probe';

// What the daemon must refuse or protect whoever asks: socket permissions, the host's and its own
// network namespace as a "workload", oversized requests, agents over TCP without a client
// certificate, and TLS key material in its log.

const execFileP = promisify(execFile);
const MIB = 1024 * 1024;

function groupId(name: string): number {
  const line = fs
    .readFileSync('/etc/group', 'utf8')
    .split('\n')
    .find((l) => l.split(':')[0] === name);
  const gid = Number(line?.split(':')[2]);
  if (!Number.isInteger(gid)) throw new Error(`no group ${name} on this machine`);
  return gid;
}

function expectSocket(p: string, mode: number, gid: number): void {
  const st = fs.statSync(p);
  expect(st.isSocket(), `${p} is a socket`).to.equal(true);
  expect((st.mode & 0o777).toString(8), `mode of ${p}`).to.equal(mode.toString(8));
  expect(st.gid, `group of ${p}`).to.equal(gid);
}

describeRoot('security (root, test-owned namespaces)', function () {
  this.timeout(90_000);

  describe('linux backend daemon in a node namespace, --socket-group daemon', () => {
    const fx = useNodeFixture({ prefix: 'wnr-', dirPrefix: 'wnr-security-', stopSignal: 'SIGKILL' });
    let daemon: DaemonProcess;
    let protectedPaths: string[];

    before(async () => {
      daemon = await fx.startDaemon({ args: ['--pod-cidr', '10.246.0.0/24', '--socket-group', 'daemon'] });
      const pid = daemon.child.pid;
      fs.symlinkSync('/proc/1/ns/net', path.join(fx.dir, 'link-to-pid1'));
      fs.symlinkSync(`/var/run/netns/${fx.node}`, path.join(fx.dir, 'link-to-own'));
      // The daemon's own namespace is the node namespace: by its bind mount, by its pid, as /proc/self
      // seen from the daemon. PID 1's is the machine's.
      protectedPaths = [
        '/proc/1/ns/net',
        path.join(fx.dir, 'link-to-pid1'),
        `/var/run/netns/${fx.node}`,
        `/proc/${pid}/ns/net`,
        `/proc/${pid}/task/${pid}/ns/net`,
        '/proc/self/ns/net',
        '/proc/thread-self/ns/net',
        path.join(fx.dir, 'link-to-own'),
      ];
    });

    /**
     * The reason given: the daemon's own namespace is named as such; PID 1's link cannot even be
     * opened where the daemon lacks ptrace rights over PID 1 (this CI sandbox), which is a refusal too.
     */
    const refusal = (p: string): RegExp =>
      p.includes('pid1') || p.startsWith('/proc/1/')
        ? /PID 1|host network namespace|cannot be opened \(EACCES\)/
        : /own network namespace|host network namespace/;

    async function nothingCreated(): Promise<void> {
      expect((await daemon.client.call(daemon.client.raw.list, {})).attachments).to.deep.equal([]);
      expect(await hostLinksInGroup(fx.node, DEFAULT_CONFIG.linux.linkGroup)).to.deep.equal([]);
      expect((await daemon.client.status()).pools[0]?.used).to.equal(0);
    }

    it('creates the API and CNI sockets with mode 0660, owned by the configured group', () => {
      const gid = groupId('daemon');
      expectSocket(daemon.socket, 0o660, gid);
      expectSocket(daemon.cniSocket, 0o660, gid);
    });

    it("refuses to attach its own network namespace or PID 1's over gRPC, however the path is spelled", async () => {
      for (const p of protectedPaths) {
        const r = await outcome(daemon.client.call(daemon.client.raw.attach, attachRequest('steal-host', p)));
        expect(codeName(r.code), `${p}: ${r.details}`).to.equal('INVALID_ARGUMENT');
        expect(r.details, p).to.match(refusal(p));
      }
      await nothingCreated();
    });

    it("refuses to attach its own network namespace or PID 1's over CNI, with error 4", async () => {
      const stdin = JSON.stringify({ cniVersion: '1.1.0', name: 'sec', type: 'workloadnet' });
      for (const p of protectedPaths) {
        const env = {
          CNI_COMMAND: 'ADD',
          CNI_CONTAINERID: 'steal-host',
          CNI_NETNS: p,
          CNI_IFNAME: 'eth0',
          CNI_PATH: '/opt/cni/bin',
        };
        const a = await postCni(daemon.cniSocket, cniEnvelope(env, stdin));
        expect(a.exitCode, `${p}: ${a.body}`).to.equal('1');
        const err = parseCniError(a.body);
        expect(err.code, `${p}: ${err.msg}`).to.equal(4);
        expect(err.msg, p).to.match(refusal(p));
      }
      await nothingCreated();
    });

    it('rejects a gRPC request over 1 MiB with RESOURCE_EXHAUSTED under both service names, and keeps serving', async () => {
      const big = attachRequest('x'.repeat(MIB + 100), `/var/run/netns/${fx.node}`);
      const own = await outcome(daemon.client.call(daemon.client.raw.attach, big));
      expect(codeName(own.code), own.details).to.equal('RESOURCE_EXHAUSTED');

      const raw = new grpc.Client(`unix:${daemon.socket}`, grpc.credentials.createInsecure());
      const seed = await new Promise<{ code: grpc.status; details: string }>((resolve) =>
        raw.makeUnaryRequest(
          `/${SEED_SERVICE}/Attach`,
          (r: AttachRequest) => Buffer.from(AttachRequest.encode(r).finish()),
          (b: Buffer) => b,
          big,
          new grpc.Metadata(),
          { deadline: Date.now() + 10_000 },
          (err) =>
            resolve(err ? { code: err.code, details: err.details } : { code: grpc.status.OK, details: '' }),
        ),
      );
      raw.close();
      expect(codeName(seed.code), seed.details).to.equal('RESOURCE_EXHAUSTED');

      // Just under the limit is an ordinary request: refused for its content, not its size.
      const justUnder = await outcome(
        daemon.client.call(daemon.client.raw.attach, attachRequest('y'.repeat(MIB - 200), '/nonexistent')),
      );
      expect(codeName(justUnder.code), justUnder.details.slice(0, 200)).to.equal('INVALID_ARGUMENT');

      expect(daemon.child.exitCode, 'the daemon is still running').to.equal(null);
      const st = await daemon.client.status();
      expect(st.version).to.not.equal('');
      await nothingCreated();
    });
  });

  describe('DPU backend daemon with agents over mutual TLS', () => {
    const fx = useNodeFixture({ prefix: 'wnr-', dirPrefix: 'wnr-security-tls-', stopSignal: 'SIGKILL' });
    let pki: TestPki;
    let daemon: DaemonProcess;
    let port: number;

    before(async () => {
      pki = makeTestPki(path.join(fx.dir, 'pki'));
      daemon = await fx.startDaemon({
        flags: {
          backend: 'dpu',
          'agent-socket': path.join(fx.dir, 'agent.sock'),
          'agent-listen': '127.0.0.1:0',
          'tls-cert': pki.serverCert,
          'tls-key': pki.serverKey,
          'tls-ca': pki.ca,
          'pod-cidr': '10.245.0.0/24',
          'socket-group': '1',
        },
      });
      const m = /listening for DPU agents.*?\(port (\d+)\)|\(port (\d+)\).*?listening for DPU agents/.exec(
        fs.readFileSync(daemon.logFile, 'utf8'),
      );
      port = Number(m?.[1] ?? m?.[2]);
      if (!port) throw new Error(`no agent port in the daemon log:\n${daemon.log()}`);
    });

    /** Runs the probe agent inside the node namespace, where the daemon's loopback listener is. */
    async function probe(
      mode: 'plain' | 'tls',
      withClientCert: boolean,
      agentId = pki.agentId,
    ): Promise<ProbeResult> {
      const args = [
        'netns',
        'exec',
        fx.node,
        process.execPath,
        TLS_PROBE_MAIN,
        `127.0.0.1:${port}`,
        agentId,
        mode,
        pki.ca,
        ...(withClientCert ? [pki.clientCert, pki.clientKey] : []),
      ];
      const { stdout } = await execFileP('ip', args, { timeout: 15_000 });
      return JSON.parse(stdout.trim()) as ProbeResult;
    }

    it('creates its sockets with the numeric --socket-group, and the agent socket for root only', () => {
      expectSocket(daemon.socket, 0o660, 1);
      expectSocket(daemon.cniSocket, 0o660, 1);
      expect((fs.statSync(path.join(fx.dir, 'agent.sock')).mode & 0o777).toString(8)).to.equal('600');
    });

    it('accepts an agent whose client certificate chains to the CA and names it', async () => {
      const r = await probe('tls', true);
      expect(r, JSON.stringify(r)).to.deep.equal({ accepted: true });
    });

    it('rejects an agent over TCP without a client certificate, and one without TLS at all', async () => {
      const noCert = await probe('tls', false);
      expect(noCert.accepted, JSON.stringify(noCert)).to.equal(false);
      expect(codeName(noCert.code ?? -1), JSON.stringify(noCert)).to.equal('UNAVAILABLE');
      const plain = await probe('plain', false);
      expect(plain.accepted, JSON.stringify(plain)).to.equal(false);
      expect(codeName(plain.code ?? -1), JSON.stringify(plain)).to.equal('UNAVAILABLE');
      // The refusals happened at the handshake: no session was ever established for them.
      const st = await daemon.client.status();
      expect(st.ready, 'no agent is connected now').to.equal(false);
    });

    it('never writes key material or certificate PEM into its log', async () => {
      // Something worth logging happened: start-up, accepted and refused agents.
      await probe('tls', true);
      await probe('tls', false);
      await probe('tls', true, 'not-the-certificate-name');
      const log = fs.readFileSync(daemon.logFile, 'utf8');
      expect(log, 'the log has content').to.match(/listening for DPU agents/);
      expect(log).to.not.match(/PRIVATE KEY/);
      expect(log).to.not.match(/BEGIN CERTIFICATE/);
      const keyBody =
        fs
          .readFileSync(pki.serverKey, 'utf8')
          .split('\n')
          .filter((l) => l && !l.startsWith('-----'))[0] ?? '';
      expect(keyBody.length).to.be.greaterThan(20);
      expect(log.includes(keyBody), 'a line of the server key appears in the log').to.equal(false);
    });

    /** Starts a daemon whose --tls-key is a malformed PEM file; returns its exit code and output. */
    async function startWithBadKey(
      secret: string,
    ): Promise<{ code: number | null; output: string; badKey: string }> {
      const badDir = fs.mkdtempSync(path.join(fx.dir, 'bad-'));
      const badKey = path.join(badDir, 'bad.key');
      fs.writeFileSync(badKey, `-----BEGIN PRIVATE KEY-----\n${secret}\n-----END PRIVATE KEY-----\n`);
      const { file, args } = daemonCommand({
        dir: badDir,
        netns: fx.node,
        flags: {
          backend: 'dpu',
          'agent-socket': path.join(badDir, 'agent.sock'),
          'agent-listen': '127.0.0.1:0',
          'tls-cert': pki.serverCert,
          'tls-key': badKey,
          'tls-ca': pki.ca,
        },
      });
      const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (c: Buffer) => (output += c.toString()));
      child.stderr.on('data', (c: Buffer) => (output += c.toString()));
      const code = await new Promise<number | null>((resolve) => {
        const t = setTimeout(() => {
          child.kill('SIGKILL');
          resolve(null);
        }, 15_000);
        child.once('exit', (c) => {
          clearTimeout(t);
          resolve(c);
        });
      });
      return { code, output, badKey };
    }

    it('refuses to start with a malformed key file without echoing its content', async () => {
      const secret = 'c2VjcmV0LWtleS1tYXRlcmlhbC10aGF0LW11c3Qtbm90LWxlYWs=';
      const { code, output } = await startWithBadKey(secret);
      expect(code, `the daemon must refuse to start with a malformed key:\n${output}`).to.equal(1);
      expect(output, 'it says why, in one line').to.match(/^workloadnetd: .+/m);
      expect(output).to.not.match(/PRIVATE KEY/);
      expect(output.includes(secret), 'the key file content appears in the output').to.equal(false);
    });

    it('names the unusable key file when it refuses to start', async () => {
      const { output, badKey } = await startWithBadKey('bm90LWEta2V5');
      expect(output).to.include(badKey);
    });

    it("refuses the machine's own network namespace reached through another process's /proc path", async () => {
      // A DPU daemon without an agent: should validation let the path through, the call stops at
      // "no agent" and nothing anywhere is programmed. This test process runs in the machine's own
      // network namespace, which is what PID 1's normally is.
      const safeDir = fs.mkdtempSync(path.join(fx.dir, 'noagent-'));
      const d = await DaemonProcess.start({
        dir: safeDir,
        netns: fx.node,
        args: [
          '--backend',
          'dpu',
          '--agent-socket',
          path.join(safeDir, 'agent.sock'),
          '--pod-cidr',
          '10.244.0.0/24',
        ],
      });
      try {
        const r = await outcome(
          d.client.call(d.client.raw.attach, attachRequest('machine-ns', `/proc/${process.pid}/ns/net`)),
        );
        expect(codeName(r.code), r.details).to.equal('INVALID_ARGUMENT');
      } finally {
        await d.kill('SIGKILL');
      }
    });
  });
});
