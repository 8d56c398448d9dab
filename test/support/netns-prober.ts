import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

// A long-lived process in a test-owned namespace that both serves and probes, so that a matrix of
// hundreds of probes costs no process start each: it listens on the given TCP and UDP ports (a TCP
// connection is answered with the server's name; a UDP datagram is echoed with it), and it takes probe
// requests on stdin (one JSON line each) and answers each on stdout. A probe is "allowed" when the
// server's answer came back within the timeout, "denied" otherwise (a dropped SYN or datagram).

export type ProbeProtocol = 'TCP' | 'UDP';

export interface ProbeRequest {
  host: string;
  port: number;
  protocol: ProbeProtocol;
  timeoutMs: number;
}

export interface ProbeAnswer {
  ok: boolean;
  /** The server's name when ok, else why not. */
  text: string;
}

const AGENT = `
const net = require('net'), dgram = require('dgram'), readline = require('readline');
const { name, tcpPorts, udpPorts } = JSON.parse(process.env.PROBER);
let up = 0; const need = tcpPorts.length + udpPorts.length * 2;
const ready = () => { if (++up === need) console.log(JSON.stringify({ up: true })); };
// A client that gave up (its probe timed out on a busy machine) resets the connection under the
// server's answer: that is the client's outcome, not the server's failure.
const serve = (s) => { s.on('error', () => undefined); s.end(name); };
for (const p of tcpPorts) net.createServer(serve).listen(p, '0.0.0.0', ready);
for (const p of udpPorts) for (const type of ['udp4', 'udp6']) {
  const u = dgram.createSocket({ type, ipv6Only: type === 'udp6' });
  u.on('message', (m, r) => u.send(name, r.port, r.address, () => undefined));
  u.bind(p, type === 'udp4' ? '0.0.0.0' : '::', ready);
}
for (const p of tcpPorts) net.createServer(serve).listen({ port: p, host: '::', ipv6Only: true }, () => undefined);
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const q = JSON.parse(line);
  let answered = false;
  const answer = (ok, text) => {
    if (answered) return;
    answered = true;
    console.log(JSON.stringify({ id: q.id, ok, text }));
  };
  if (q.protocol === 'TCP') {
    const s = net.connect(q.port, q.host); let d = '';
    const t = setTimeout(() => { s.destroy(); answer(false, 'timeout'); }, q.timeoutMs);
    s.on('data', (c) => (d += c));
    s.on('end', () => { clearTimeout(t); answer(d !== '', d || 'closed'); });
    s.on('error', (e) => { clearTimeout(t); answer(false, e.code || e.message); });
  } else {
    const u = dgram.createSocket(q.host.includes(':') ? 'udp6' : 'udp4');
    const finish = (ok, text) => { clearTimeout(t); if (!answered) u.close(); answer(ok, text); };
    const t = setTimeout(() => finish(false, 'timeout'), q.timeoutMs);
    u.on('message', (m) => finish(true, m.toString()));
    u.on('error', (e) => finish(false, e.code || e.message));
    u.send('probe', q.port, q.host);
  }
});
`;

export class NetnsProber {
  private child?: ChildProcess;
  private next = 0;
  private readonly pending = new Map<number, (a: ProbeAnswer | Error) => void>();
  private died?: Error;

  constructor(
    readonly netns: string,
    readonly name: string,
  ) {}

  /** Starts serving `tcp` and `udp` ports in the namespace; resolves once every socket listens. */
  async start(tcp: readonly number[], udp: readonly number[]): Promise<void> {
    const child = spawn('ip', ['netns', 'exec', this.netns, process.execPath, '-e', AGENT], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, PROBER: JSON.stringify({ name: this.name, tcpPorts: tcp, udpPorts: udp }) },
    });
    this.child = child;
    let err = '';
    child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    await new Promise<void>((resolve, reject) => {
      lines.on('line', (line) => {
        const msg = JSON.parse(line) as { up?: boolean; id?: number; ok?: boolean; text?: string };
        if (msg.up) return resolve();
        const done = this.pending.get(msg.id ?? -1);
        this.pending.delete(msg.id ?? -1);
        done?.({ ok: msg.ok === true, text: msg.text ?? '' });
      });
      child.once('exit', (code, signal) => {
        // A prober that dies fails its probes at once, in words: a probe left waiting would hang its
        // test until mocha's timeout, and hide why.
        this.died = new Error(`prober ${this.name} exited (${String(code ?? signal)}): ${err}`);
        for (const settle of this.pending.values()) settle(this.died);
        this.pending.clear();
        reject(this.died);
      });
    });
  }

  probe(req: ProbeRequest): Promise<ProbeAnswer> {
    if (this.died) return Promise.reject(this.died);
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, (a) => (a instanceof Error ? reject(a) : resolve(a)));
      this.child?.stdin?.write(`${JSON.stringify({ id, ...req })}\n`);
    });
  }

  stop(): void {
    this.child?.removeAllListeners('exit');
    this.child?.kill('SIGKILL');
    this.child = undefined;
    for (const done of this.pending.values()) done({ ok: false, text: 'prober stopped' });
    this.pending.clear();
  }
}
