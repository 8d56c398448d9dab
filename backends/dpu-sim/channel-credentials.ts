import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';

// How the simulator dials the daemon: in the clear on a unix socket, or with mutual TLS from the
// certificate, key and CA files it was given.

export interface TlsFiles {
  cert: string;
  key: string;
  ca: string;
  serverName?: string;
}

export function channelCredentials(tls: TlsFiles | undefined): grpc.ChannelCredentials {
  if (!tls) return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(
    fs.readFileSync(tls.ca),
    fs.readFileSync(tls.key),
    fs.readFileSync(tls.cert),
  );
}
