/*
 * The daemon's CNI endpoint: HTTP/1.1 over a unix socket, spoken by the native forwarder
 * (shim/workloadnet-cni.c) that container runtimes execute as the `workloadnet` plugin.
 *
 * Wire format (kept this small on purpose: the forwarder is a few hundred lines of C):
 *
 *   POST /v1/cni HTTP/1.1
 *   Host: workloadnet
 *   Content-Type: application/json
 *   Content-Length: <n>
 *   Connection: close
 *
 *   {"env":{"CNI_COMMAND":"ADD","CNI_CONTAINERID":"…",…every CNI_* variable…},"stdin":"<stdin, verbatim>"}
 *
 * `env` holds string values only; `stdin` is the plugin's stdin as one JSON string. The answer is always
 * framed by Content-Length (never chunked), and for /v1/cni always has status 200, whatever the outcome:
 *
 *   HTTP/1.1 200 OK
 *   Content-Type: application/json
 *   X-CNI-Exit-Code: <exit status for the plugin, 0 on success, 1 on error>
 *   Content-Length: <n>
 *
 *   <exactly what the plugin prints on stdout: a CNI result, CNI error JSON, or nothing for a
 *    successful DEL/CHECK/STATUS/GC>
 *
 * Any other path or method gets 404/405, still with X-CNI-Exit-Code: 1 and CNI error JSON, so a
 * mismatched forwarder prints something a person can act on. A body larger than maxBodyBytes is read
 * and discarded, and answered with CNI error 6, before anything is parsed or changed.
 *
 * Connections are bounded: the forwarder sends its whole request at once, so a connection that has
 * not sent its headers within headerTimeoutMs, or its body within bodyTimeoutMs after them, is closed
 * (408), as is a kept-alive one idle for idleTimeoutMs; at maxConnections a connection still sending
 * its request is closed to make room for a new one. Calls being served are never cut short by these.
 */
import { promises as fs } from 'node:fs';
import * as http from 'node:http';
import type * as net from 'node:net';
import { ConnectionCap } from '../../core/serve/connection-cap';
import { silentLogger, type Logger } from '../../core/logger';
import { failedPrecondition } from '../../core/errors';
import { LogRate } from '../../lib/log-rate';
import { listenOnSocket, prepareSocketPath } from '../../core/serve/unix-socket';
import type { WorkloadService } from '../../core/workload-service';
import { CniError, CniErrorCode, formatCniError } from './cni-error';
import { CniHandler, type CniReply } from './cni-handler';
import { LATEST_CNI_VERSION } from './cni-version';

export interface CniServerOptions {
  socketPath: string;
  /** Group that may connect besides the owner (name or gid); empty: the owner's only. */
  socketGroup?: string;
  /** Largest request body accepted; default 1 MiB (a CNI config is a few KiB). */
  maxBodyBytes?: number;
  logger?: Logger;
  /** MTU for attachments whose network config sets none. */
  defaultMtu?: number;
  /** The network config's `name` selects the daemon's network (see CniHandlerOptions). */
  networkFromName?: boolean;
  /** Time a connection has to send its request headers; default 5 s. */
  headerTimeoutMs?: number;
  /** Time a request has, after its headers, to send its body; default 10 s. */
  bodyTimeoutMs?: number;
  /** A kept-alive connection idle this long is closed; default 5 s. */
  idleTimeoutMs?: number;
  /** Connections held at once; default 512. */
  maxConnections?: number;
}

export const CNI_CONNECTION_DEFAULTS = {
  headerTimeoutMs: 5000,
  bodyTimeoutMs: 10_000,
  idleTimeoutMs: 5000,
  maxConnections: 512,
} as const;

export const CNI_ENDPOINT = '/v1/cni';
export const CNI_EXIT_CODE_HEADER = 'X-CNI-Exit-Code';

const DEFAULT_MAX_BODY = 1024 * 1024;
/** Past this many times the limit, stop draining an oversize body and drop the connection. */
const DRAIN_FACTOR = 16;

export class CniServer {
  private readonly handler: CniHandler;
  private readonly logger: Logger;
  private readonly maxBody: number;
  private server: http.Server | undefined;
  private socketIno: number | undefined;
  private cap: ConnectionCap | undefined;
  /** Connections whose request is complete and being answered: never closed to make room. */
  private readonly serving = new WeakSet<net.Socket>();
  private readonly limitLog = new LogRate();

  constructor(
    service: WorkloadService,
    private readonly opts: CniServerOptions,
  ) {
    this.logger = opts.logger ?? silentLogger();
    this.maxBody = opts.maxBodyBytes ?? DEFAULT_MAX_BODY;
    this.handler = new CniHandler(service, {
      logger: this.logger,
      ...(opts.defaultMtu === undefined ? {} : { defaultMtu: opts.defaultMtu }),
      ...(opts.networkFromName ? { networkFromName: true } : {}),
    });
  }

  async listen(): Promise<void> {
    if (this.server) throw failedPrecondition(`CNI server already listening on ${this.opts.socketPath}`);
    const socketPath = this.opts.socketPath;
    await prepareSocketPath(socketPath);

    const limits = { ...CNI_CONNECTION_DEFAULTS, ...definedOnly(this.opts) };
    const server = http.createServer(
      {
        headersTimeout: limits.headerTimeoutMs,
        requestTimeout: limits.headerTimeoutMs + limits.bodyTimeoutMs,
        keepAliveTimeout: limits.idleTimeoutMs,
        // Node checks the two request timeouts on this interval (30 s by default).
        connectionsCheckingInterval: Math.min(1000, limits.headerTimeoutMs),
      },
      (req, res) => this.onRequest(req, res),
    );
    const cap = new ConnectionCap(limits.maxConnections, {
      evictable: (socket) => !this.serving.has(socket),
    });
    this.cap = cap;
    server.on('connection', (socket: net.Socket) => {
      const outcome = cap.admit(socket);
      if (outcome === 'admitted') return;
      const n = this.limitLog.take('cap');
      if (n !== undefined) {
        this.logger.warn(
          { limit: limits.maxConnections, occurrences: n, outcome },
          outcome === 'refused'
            ? 'CNI connection limit reached: every connection is being served; new connection refused'
            : 'CNI connection limit reached: closed a connection still sending its request to make room',
        );
      }
    });
    server.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
      const timedOut = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
      if (timedOut) {
        const n = this.limitLog.take('timeout');
        if (n !== undefined) {
          this.logger.warn(
            {
              headerTimeoutMs: limits.headerTimeoutMs,
              bodyTimeoutMs: limits.bodyTimeoutMs,
              occurrences: n,
            },
            'CNI connection closed: no complete request in time',
          );
        }
      }
      if (socket.writable && !socket.destroyed) {
        socket.end(
          timedOut
            ? 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n'
            : 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n',
        );
      }
      socket.destroy();
    });
    await listenOnSocket(server, socketPath, 'CNI', { group: this.opts.socketGroup ?? '' });
    this.socketIno = (await fs.stat(socketPath)).ino;
    this.server = server;
    this.logger.info({ socket: socketPath }, 'CNI endpoint listening');
  }

  /**
   * Stops accepting calls and closes idle connections at once; calls being served may finish within
   * `graceMs`, after which every connection is closed. Removes the socket.
   */
  async close(graceMs = 5000): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        server.closeAllConnections();
        this.cap?.destroyAll();
      }, graceMs);
      timer.unref();
      server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      server.closeIdleConnections();
      // Connections that have not finished sending a request are idle as far as we are concerned:
      // nothing they could still send would be served.
      this.cap?.closeWhere((socket) => !this.serving.has(socket));
    });
    // Remove the path only while it is still our socket: a successor may already have bound it.
    try {
      const st = await fs.lstat(this.opts.socketPath);
      if (st.ino === this.socketIno) await fs.unlink(this.opts.socketPath);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  private onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    if (req.url !== CNI_ENDPOINT) {
      req.resume();
      send(
        res,
        404,
        localError(`unknown endpoint ${req.url ?? ''}; the CNI forwarder posts to ${CNI_ENDPOINT}`),
      );
      return;
    }
    if (req.method !== 'POST') {
      req.resume();
      send(res, 405, localError(`${CNI_ENDPOINT} accepts POST only, not ${req.method ?? ''}`));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let oversize = Number(req.headers['content-length'] ?? 0) > this.maxBody;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > this.maxBody * DRAIN_FACTOR) {
        // Not worth draining further: the sender is not a CNI runtime.
        req.destroy();
        return;
      }
      if (oversize) return;
      if (size > this.maxBody) {
        oversize = true;
        chunks.length = 0;
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', (err) => this.logger.warn({ err }, 'CNI request stream failed'));
    req.on('end', () => {
      const socket = req.socket;
      this.serving.add(socket);
      res.once('close', () => this.serving.delete(socket));
      if (oversize) {
        const err = new CniError(
          CniErrorCode.DECODING_FAILURE,
          `CNI request of ${size} bytes exceeds the daemon's limit of ${this.maxBody} bytes`,
        );
        this.logger.warn({ bytes: size, limit: this.maxBody }, 'CNI request refused: too large');
        send(res, 200, { exitCode: 1, stdout: formatCniError(err, LATEST_CNI_VERSION) });
        return;
      }
      this.serve(Buffer.concat(chunks).toString('utf8')).then(
        (reply) => send(res, 200, reply),
        (err: unknown) => {
          // handle() never throws; this only guards against a bug turning into a hung forwarder.
          this.logger.error({ err }, 'CNI request failed unexpectedly');
          send(res, 200, localError(`internal error: ${err instanceof Error ? err.message : String(err)}`));
        },
      );
    });
  }

  private async serve(body: string): Promise<CniReply> {
    let envelope: unknown;
    try {
      envelope = JSON.parse(body);
    } catch {
      return decodeError('request body is not JSON');
    }
    if (typeof envelope !== 'object' || envelope === null || Array.isArray(envelope)) {
      return decodeError('request body must be a JSON object {"env":{…},"stdin":"…"}');
    }
    const { env: rawEnv, stdin: rawStdin } = envelope as { env?: unknown; stdin?: unknown };
    const env: Record<string, string> = {};
    if (rawEnv !== undefined) {
      if (typeof rawEnv !== 'object' || rawEnv === null || Array.isArray(rawEnv)) {
        return decodeError('"env" must be an object of strings');
      }
      for (const [k, v] of Object.entries(rawEnv)) {
        if (typeof v !== 'string') return decodeError(`"env.${k}" must be a string`);
        env[k] = v;
      }
    }
    if (rawStdin !== undefined && typeof rawStdin !== 'string')
      return decodeError('"stdin" must be a string');
    return this.handler.handle(env, rawStdin ?? '');
  }
}

function definedOnly(opts: CniServerOptions): Partial<typeof CNI_CONNECTION_DEFAULTS> {
  const out: Record<string, number> = {};
  for (const key of Object.keys(CNI_CONNECTION_DEFAULTS) as Array<keyof typeof CNI_CONNECTION_DEFAULTS>) {
    const v = opts[key];
    if (v !== undefined) out[key] = v;
  }
  return out;
}

function decodeError(msg: string): CniReply {
  return {
    exitCode: 1,
    stdout: formatCniError(new CniError(CniErrorCode.DECODING_FAILURE, msg), LATEST_CNI_VERSION),
  };
}

function localError(msg: string): CniReply {
  return {
    exitCode: 1,
    stdout: formatCniError(new CniError(CniErrorCode.INTERNAL, msg), LATEST_CNI_VERSION),
  };
}

function send(res: http.ServerResponse, status: number, reply: CniReply): void {
  if (res.destroyed) return;
  // The forwarder frames the body by Content-Length; setting it also keeps Node from chunking.
  res.writeHead(status, {
    'Content-Type': 'application/json',
    [CNI_EXIT_CODE_HEADER]: String(reply.exitCode),
    'Content-Length': Buffer.byteLength(reply.stdout),
  });
  res.end(reply.stdout);
}

/** Remove a socket left by a dead daemon; refuse when a live one still answers on it. */
