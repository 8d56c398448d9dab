import * as fs from 'node:fs';
import type { IOptions } from 'etcd3';

// How this daemon connects to etcd, for every part that talks to it (the pool source, the peer
// source): the same endpoints, TLS files and deadlines, so both fail and recover alike.

export interface EtcdConnectionOptions {
  endpoints: string[];
  /** PEM files; ca alone = TLS, with cert and key = mutual TLS. */
  tls?: { ca: string; cert?: string; key?: string };
  /** Deadline of one unary call (ms). */
  callTimeoutMs: number;
}

export function etcdClientOptions(opts: EtcdConnectionOptions): IOptions {
  const tls = opts.tls;
  return {
    hosts: opts.endpoints,
    dialTimeout: opts.callTimeoutMs,
    // Unary calls get a deadline so nothing waits on a dead member; streams (lease keep-alive, watch)
    // do not.
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + opts.callTimeoutMs }),
    credentials: tls?.ca
      ? {
          rootCertificate: fs.readFileSync(tls.ca),
          certChain: tls.cert ? fs.readFileSync(tls.cert) : undefined,
          privateKey: tls.key ? fs.readFileSync(tls.key) : undefined,
        }
      : undefined,
  };
}
