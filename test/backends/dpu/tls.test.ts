import { expect } from 'chai';
import * as path from 'node:path';
import { DpuBackend } from '../../../backends/dpu';
import { makeCa, makeLeaf, makeTestPki, type TestPki } from '../../support/pki';
import { expectCode, removeDir, scratchDir } from '../../support/dpu-fixtures';
import { simRig } from '../../support/sim-rig';
import { SimProcess, sleep } from '../../support/sim-process';

// Agents over TCP: mutual TLS, and the hello's agent id must be a name the client certificate carries.
// Certificates are made fresh with openssl for every run.

/**
 * The test PKI for agent "dpu-a" (also named "dpu-a.example"), and a client certificate for "dpu-a"
 * signed by a CA the daemon does not trust.
 */
interface Pki extends TestPki {
  rogueCert: string;
  rogueKey: string;
}

function makePki(dir: string): Pki {
  const pki = makeTestPki(dir, 'dpu-a', ['dpu-a.example']);
  const rogue = makeLeaf(
    dir,
    makeCa(dir, 'rogue-ca'),
    'rogue',
    'dpu-a',
    'subjectAltName=DNS:dpu-a\nextendedKeyUsage=clientAuth\n',
  );
  return { ...pki, rogueCert: rogue.cert, rogueKey: rogue.key };
}

describe('DPU backend: agents over mutual TLS', function () {
  this.timeout(30_000);
  let pkiDir: string;
  let pki: Pki;
  const rig = simRig();

  before(() => {
    pkiDir = scratchDir();
    pki = makePki(pkiDir);
  });
  after(() => removeDir(pkiDir));

  async function tlsBackend(): Promise<{ b: DpuBackend; port: number }> {
    const b = await rig.startBackend({
      agentListen: '127.0.0.1:0',
      tls: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
    });
    const port = b.agentTcpPort;
    if (!port) throw new Error('no TCP port bound');
    return { b, port };
  }

  function tlsSim(port: number, agentId: string, cert: string, key: string, stateName: string): SimProcess {
    return rig.track(
      SimProcess.start({
        controller: `127.0.0.1:${port}`,
        agentId,
        stateFile: path.join(rig.dir, stateName),
        extra: ['--tls-cert', cert, '--tls-key', key, '--tls-ca', pki.ca],
      }),
    );
  }

  it('accepts an agent whose id is named in its client certificate', async () => {
    const { b, port } = await tlsBackend();
    const s = tlsSim(port, 'dpu-a', pki.clientCert, pki.clientKey, 'ok.json');
    await s.waitForState((x) => x.session.state === 'connected' && x.synced, 'connected');
    const h = await b.health();
    expect(h.ready, h.reasons.join('; ')).to.equal(true);
    expect(h.details).to.include({ agentId: 'dpu-a' });
    expect(String(h.details?.agentPeer)).to.match(/127\.0\.0\.1/);
  });

  it('accepts a subject alternative name as the agent id', async () => {
    const { port } = await tlsBackend();
    const s = tlsSim(port, 'dpu-a.example', pki.clientCert, pki.clientKey, 'san.json');
    await s.waitForState((x) => x.session.state === 'connected', 'connected');
  });

  it('rejects an agent whose id does not match its certificate', async () => {
    const { b, port } = await tlsBackend();
    const s = tlsSim(port, 'dpu-b', pki.clientCert, pki.clientKey, 'mismatch.json');
    const st = await s.waitForState((x) => (x.session.rejections ?? 0) >= 1, 'rejected');
    expect(st.session.lastRejectReason).to.match(
      /agent id dpu-b does not match the client certificate \(names: dpu-a, dpu-a\.example\)/,
    );
    expect((await b.health()).ready).to.equal(false);
  });

  it('refuses a client certificate from an untrusted CA at the handshake', async () => {
    const { b, port } = await tlsBackend();
    const s = tlsSim(port, 'dpu-a', pki.rogueCert, pki.rogueKey, 'rogue.json');
    await s.waitForState(
      (x) => x.session.state === 'disconnected' && /UNAVAILABLE/.test(x.session.reason ?? ''),
      'handshake failure',
    );
    await sleep(300);
    expect(s.state()?.session.state).to.not.equal('connected');
    expect((await b.health()).ready).to.equal(false);
  });

  it('refuses to listen on TCP without TLS', async () => {
    const b = new DpuBackend({ agentSocket: path.join(rig.dir, 'notls.sock'), agentListen: '127.0.0.1:0' });
    const err = await expectCode(b.start(), 'INVALID_ARGUMENT');
    expect(err.message).to.match(/agents over TCP must use mutual TLS/);
  });
});
