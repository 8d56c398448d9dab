import { spawn } from 'node:child_process';

// Real traffic between two test-owned namespaces, for a rate a shaper should hold: a TCP receiver in
// one counts what arrives in a fixed window after the first byte, a sender in the other writes as fast
// as the path takes it. Node itself is the tool (no iperf on the machine).

const RECEIVER = `
const net = require('net');
const [port, ms] = process.argv.slice(1).map(Number);
let bytes = 0, start = 0;
const srv = net.createServer((s) => s.on('data', (d) => {
  if (!start) { start = Date.now(); setTimeout(() => { process.stdout.write(JSON.stringify({ bytes, ms: Date.now() - start })); process.exit(0); }, ms); }
  bytes += d.length;
}));
srv.listen(port, '::', () => process.stdout.write('ready\\n'));
`;

const SENDER = `
const net = require('net');
const [host, port] = [process.argv[1], Number(process.argv[2])];
const chunk = Buffer.alloc(64 * 1024, 7);
const s = net.connect(port, host, () => { const go = () => { while (s.write(chunk)); }; s.on('drain', go); go(); });
s.on('error', () => process.exit(0));
`;

/** Megabits per second that arrive at `toAddress` (in `toNetns`) from `fromNetns` over `windowMs`. */
export async function measureMbps(
  fromNetns: string,
  toNetns: string,
  toAddress: string,
  windowMs = 2000,
  port = 5201,
): Promise<number> {
  const receiver = spawn('ip', [
    'netns',
    'exec',
    toNetns,
    process.execPath,
    '-e',
    RECEIVER,
    String(port),
    String(windowMs),
  ]);
  let out = '';
  receiver.stdout.setEncoding('utf8');
  const ready = new Promise<void>((resolve, reject) => {
    receiver.stdout.on('data', (d: string) => {
      out += d;
      if (out.includes('ready\n')) resolve();
    });
    receiver.on('exit', (code) => reject(new Error(`receiver exited (${code}) before it listened`)));
  });
  const done = new Promise<string>((resolve) => receiver.on('exit', () => resolve(out)));
  await ready;
  const sender = spawn(
    'ip',
    ['netns', 'exec', fromNetns, process.execPath, '-e', SENDER, toAddress, String(port)],
    {
      stdio: 'ignore',
    },
  );
  const timer = setTimeout(() => receiver.kill('SIGKILL'), windowMs + 10_000);
  try {
    const text = await done;
    const result = JSON.parse(text.slice(text.indexOf('{'))) as { bytes: number; ms: number };
    return (result.bytes * 8) / 1e6 / (result.ms / 1000);
  } finally {
    clearTimeout(timer);
    sender.kill('SIGKILL');
  }
}
