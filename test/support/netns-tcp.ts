import { execFile } from 'node:child_process';
import { NetnsServers } from './netns-servers';

// TCP in test-owned namespaces, to see who reaches whom and as what: a listener answers each connection
// with its own name and the source address it saw, and a client prints that answer.

export class TcpListeners extends NetnsServers {
  /** Listens on `port` (every IPv4 address) in namespace `netns`, once it is up. */
  listen(netns: string, port: number, name: string): Promise<void> {
    const code = `require('net').createServer((s) => { s.on('error', () => undefined); s.end(${JSON.stringify(name)} + ' saw ' + s.remoteAddress); }).listen(${port}, '0.0.0.0', () => console.log('up'))`;
    return this.run(netns, code, `listener ${name}`);
  }
}

/** Connects from namespace `netns` to host:port: what the listener answered, or "error: …". */
export function tcpAsk(netns: string, host: string, port: number): Promise<string> {
  const code = `const s = require('net').connect(${port}, ${JSON.stringify(host)}); let d = ''; s.on('data', (c) => (d += c)); s.on('end', () => process.stdout.write(d)); s.on('error', (e) => process.stdout.write('error: ' + e.message)); s.setTimeout(4000, () => { process.stdout.write('error: timeout'); process.exit(0); });`;
  return new Promise((resolve) =>
    execFile('ip', ['netns', 'exec', netns, process.execPath, '-e', code], { encoding: 'utf8' }, (e, out) =>
      resolve(out || `error: ${e?.message ?? 'no answer'}`),
    ),
  );
}

/** An HTTP GET from namespace `netns`: the status code and body, or status 0 when nothing answers. */
export function httpGetIn(netns: string, url: string): Promise<{ status: number; body: string }> {
  const code = `fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) }).then(async (r) => process.stdout.write(JSON.stringify({ status: r.status, body: await r.text() })), () => process.stdout.write('{"status":0,"body":""}'))`;
  return new Promise((resolve) =>
    execFile(
      'ip',
      ['netns', 'exec', netns, process.execPath, '-e', code],
      { encoding: 'utf8', maxBuffer: 16 << 20 },
      (_e, out) =>
        resolve(out ? (JSON.parse(out) as { status: number; body: string }) : { status: 0, body: '' }),
    ),
  );
}
