import * as http from 'node:http';
import * as net from 'node:net';

// The CNI endpoint as the native forwarder speaks to it: one HTTP/1.1 POST over the unix socket with
// {"env":{…},"stdin":"…"}, answered with the plugin's stdout and an X-CNI-Exit-Code header. Also a raw
// socket for requests no HTTP client would send.

export interface CniAnswer {
  status: number;
  exitCode: string | undefined;
  contentType: string | undefined;
  body: string;
}

/** Sends `body` to the CNI endpoint (a POST to /v1/cni unless `opts` says otherwise). */
export function postCni(
  socketPath: string,
  body: string | Buffer,
  opts: { method?: string; path?: string; headers?: http.OutgoingHttpHeaders } = {},
): Promise<CniAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        socketPath,
        method: opts.method ?? 'POST',
        path: opts.path ?? '/v1/cni',
        headers: { 'Content-Type': 'application/json', ...opts.headers },
        timeout: 10_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            exitCode: res.headers['x-cni-exit-code'] as string | undefined,
            contentType: res.headers['content-type'],
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('CNI endpoint did not answer within 10 s')));
    req.on('error', reject);
    req.end(body);
  });
}

export const cniEnvelope = (env: Record<string, string>, stdin: string): string =>
  JSON.stringify({ env, stdin });

/** Writes raw bytes and returns whatever comes back before the server closes (or `waitMs` pass). */
export function rawExchange(socketPath: string, bytes: Buffer | string, waitMs = 2_000): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const sock = net.connect(socketPath);
    const done = (): void => {
      clearTimeout(timer);
      sock.destroy();
      resolve(Buffer.concat(chunks).toString('latin1'));
    };
    const timer = setTimeout(done, waitMs);
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.on('end', done);
    sock.on('close', done);
    sock.on('error', done);
    sock.on('connect', () => sock.write(bytes));
  });
}

/** The fields every CNI error printed on stdout must have (spec "Error"). */
export interface CniErrorJson {
  cniVersion: string;
  code: number;
  msg: string;
  details?: string;
}

export function parseCniError(body: string): CniErrorJson {
  const v = JSON.parse(body) as Partial<CniErrorJson>;
  if (
    typeof v.cniVersion !== 'string' ||
    !Number.isInteger(v.code) ||
    typeof v.msg !== 'string' ||
    v.msg === ''
  ) {
    throw new Error(`not a CNI error: ${body.slice(0, 300)}`);
  }
  return v as CniErrorJson;
}
