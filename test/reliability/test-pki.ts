import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

// Throw-away certificates for the TLS tests, made with openssl(1) in a scratch directory: a CA, a
// server certificate for 127.0.0.1, and an agent (client) certificate.

export interface TestPki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** The agent id the client certificate vouches for. */
  agentId: string;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

const ecKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function leaf(dir: string, name: string, cn: string, ext: string): void {
  openssl(dir, ['req', ...ecKey, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`]);
  fs.writeFileSync(path.join(dir, `${name}.ext`), ext);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    `${name}.csr`,
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    `${name}.crt`,
    '-days',
    '2',
    '-extfile',
    `${name}.ext`,
  ]);
}

export function makeTestPki(dir: string, agentId = 'dpu-tls'): TestPki {
  fs.mkdirSync(dir, { recursive: true });
  openssl(dir, [
    'req',
    '-x509',
    ...ecKey,
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-subj',
    '/CN=wnr-test-ca',
    '-days',
    '2',
  ]);
  leaf(
    dir,
    'server',
    'workloadnetd',
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n',
  );
  leaf(dir, 'client', agentId, 'extendedKeyUsage=clientAuth\n');
  const p = (f: string): string => path.join(dir, f);
  return {
    ca: p('ca.crt'),
    serverCert: p('server.crt'),
    serverKey: p('server.key'),
    clientCert: p('client.crt'),
    clientKey: p('client.key'),
    agentId,
  };
}
