import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

// Throw-away certificates for the TLS tests, made with openssl(1) in a scratch directory: CAs, and leaf
// certificates signed by one of them. Keys are P-256 and everything expires after two days.

/** A certificate and its key, as file paths. */
export interface CertAndKey {
  cert: string;
  key: string;
}

/** A CA, a server certificate for 127.0.0.1, and an agent (client) certificate, all made by `makeTestPki`. */
export interface TestPki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** The agent id the client certificate vouches for (its CN). */
  agentId: string;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

const newEcKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** A self-signed CA `<name>.crt` (CN `name`) and its key in `dir`. */
export function makeCa(dir: string, name: string): CertAndKey {
  const out = { cert: path.join(dir, `${name}.crt`), key: path.join(dir, `${name}.key`) };
  openssl(dir, [
    'req',
    '-x509',
    ...newEcKey,
    '-keyout',
    out.key,
    '-out',
    out.cert,
    '-subj',
    `/CN=${name}`,
    '-days',
    '2',
  ]);
  return out;
}

/** A certificate `<name>.crt` for `cn` signed by `ca`, with the X.509 extensions given in `ext`. */
export function makeLeaf(dir: string, ca: CertAndKey, name: string, cn: string, ext: string): CertAndKey {
  const file = (suffix: string): string => path.join(dir, `${name}.${suffix}`);
  openssl(dir, ['req', ...newEcKey, '-keyout', file('key'), '-out', file('csr'), '-subj', `/CN=${cn}`]);
  fs.writeFileSync(file('ext'), ext);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    file('csr'),
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-CAcreateserial',
    '-out',
    file('crt'),
    '-days',
    '2',
    '-extfile',
    file('ext'),
  ]);
  return { cert: file('crt'), key: file('key') };
}

/**
 * A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate for `agentId` that
 * also names `agentAltNames` (as DNS subject alternative names).
 */
export function makeTestPki(dir: string, agentId = 'dpu-tls', agentAltNames: string[] = []): TestPki {
  fs.mkdirSync(dir, { recursive: true });
  const ca = makeCa(dir, 'ca');
  const server = makeLeaf(
    dir,
    ca,
    'server',
    'workloadnetd',
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n',
  );
  const altNames = agentAltNames.map((n) => `DNS:${n}`).join(',');
  const client = makeLeaf(
    dir,
    ca,
    'client',
    agentId,
    `${altNames ? `subjectAltName=${altNames}\n` : ''}extendedKeyUsage=clientAuth\n`,
  );
  return {
    ca: ca.cert,
    serverCert: server.cert,
    serverKey: server.key,
    clientCert: client.cert,
    clientKey: client.key,
    agentId,
  };
}
