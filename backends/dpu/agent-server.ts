import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { prepareSocketPath, secureSocket } from '../../core/serve/unix-socket';
import type { Logger } from '../../core/logger';
import { failedPrecondition, invalidArgument, unavailable } from '../../core/errors';
import {
  DpuAgentServiceService,
  type AgentMessage,
  type ControllerMessage,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { certificateNames } from './tls-identity';

// The listener agents dial. The unix socket is the normal case (the agent runs on the host, or its
// socket is forwarded); a TCP listener serves agents that reach the host over the network and is only
// ever offered with mutual TLS, since the agent's identity is then the only thing that stops one DPU
// from programming another's ports.

export type AgentCall = grpc.ServerDuplexStream<AgentMessage, ControllerMessage>;

export interface AgentPeer {
  transport: 'unix' | 'tls';
  /** gRPC's peer string, for logs. */
  address: string;
  /** Names the client certificate vouches for (TLS only). */
  certificateNames: string[];
}

export interface TlsFiles {
  cert: string;
  key: string;
  ca: string;
}

export interface AgentServerOptions {
  socketPath: string;
  /** "HOST:PORT" (port 0 picks a free one); requires `tls`. */
  listen?: string;
  tls?: TlsFiles;
  /** Largest agent message accepted; larger ones end the stream with RESOURCE_EXHAUSTED. */
  maxMessageBytes: number;
  logger: Logger;
  onStream: (call: AgentCall, peer: AgentPeer) => void;
}

/**
 * Reads one PEM file and parses it on its own, so that a bad file is named in the error instead of
 * surfacing as an anonymous OpenSSL decoder error from the TLS listener. Never logs the contents.
 */
function readPem(what: 'CA' | 'certificate' | 'key', file: string): Buffer {
  let pem: Buffer;
  try {
    pem = fs.readFileSync(file);
  } catch (err) {
    throw failedPrecondition(`cannot read the DPU agent TLS ${what} ${file}: ${(err as Error).message}`);
  }
  try {
    if (what === 'key') crypto.createPrivateKey(pem);
    else new crypto.X509Certificate(pem);
  } catch (err) {
    throw failedPrecondition(
      `the DPU agent TLS ${what} file ${file} is not a usable PEM ${what === 'key' ? 'private key' : 'certificate'}: ${(err as Error).message}`,
    );
  }
  return pem;
}

function bind(server: grpc.Server, address: string, creds: grpc.ServerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, creds, (err, port) => (err ? reject(err) : resolve(port)));
  });
}

export class AgentServer {
  private readonly server: grpc.Server;
  private boundTcpPort: number | undefined;

  constructor(private readonly opts: AgentServerOptions) {
    if (opts.listen && !opts.tls) {
      throw invalidArgument(
        `dpu.agentListen ${opts.listen} needs dpu.tlsCert, dpu.tlsKey and dpu.tlsCa: agents over TCP must use mutual TLS`,
      );
    }
    this.server = new grpc.Server({
      'grpc.max_receive_message_length': opts.maxMessageBytes,
      // Dead TCP peers are found by our heartbeats; keepalive also frees the HTTP/2 connection itself.
      'grpc.keepalive_time_ms': 30_000,
      'grpc.keepalive_timeout_ms': 10_000,
    });
    this.server.addService(DpuAgentServiceService, {
      connect: (call: AgentCall) => opts.onStream(call, this.peerOf(call)),
    });
  }

  private peerOf(call: AgentCall): AgentPeer {
    const auth = call.getAuthContext();
    const tls = auth?.transportSecurityType === 'ssl';
    return {
      transport: tls ? 'tls' : 'unix',
      address: call.getPeer(),
      certificateNames: tls ? certificateNames(auth?.sslPeerCertificate) : [],
    };
  }

  /** The TCP port actually bound (useful when agentListen asked for port 0). */
  get tcpPort(): number | undefined {
    return this.boundTcpPort;
  }

  async start(): Promise<void> {
    const { socketPath, listen, tls, logger } = this.opts;
    if (!path.isAbsolute(socketPath))
      throw invalidArgument(`dpu.agentSocket must be an absolute path, got ${socketPath}`);
    await fs.promises.mkdir(path.dirname(socketPath), { recursive: true, mode: 0o755 });
    // The same rules as the API sockets: a live socket belongs to another daemon and is never stolen.
    await prepareSocketPath(socketPath);
    try {
      await bind(this.server, `unix:${socketPath}`, grpc.ServerCredentials.createInsecure());
    } catch (err) {
      throw unavailable(`cannot listen for DPU agents on ${socketPath}: ${(err as Error).message}`);
    }
    // Only root (the agent's usual identity on the host) may program ports through the socket.
    secureSocket(socketPath, '', 0o600);
    if (listen && tls) {
      const creds = grpc.ServerCredentials.createSsl(
        readPem('CA', tls.ca),
        [{ cert_chain: readPem('certificate', tls.cert), private_key: readPem('key', tls.key) }],
        true,
      );
      try {
        this.boundTcpPort = await bind(this.server, listen, creds);
      } catch (err) {
        await this.stop();
        throw unavailable(`cannot listen for DPU agents on ${listen}: ${(err as Error).message}`);
      }
    }
    logger.info(
      { socket: socketPath, listen: listen ? `${listen} (port ${this.boundTcpPort})` : undefined },
      'listening for DPU agents',
    );
  }

  async stop(): Promise<void> {
    // Streams never finish on their own, so a graceful shutdown would wait forever: give in-flight
    // writes a moment, then cut the rest.
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, 200);
      this.server.tryShutdown(() => {
        clearTimeout(t);
        resolve();
      });
    });
    await fs.promises.unlink(this.opts.socketPath).catch(() => undefined);
  }
}
