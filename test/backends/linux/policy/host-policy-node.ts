import { execFile, execFileSync } from 'node:child_process';
import type { NetnsSet, TestNamespace } from '../../../support/netns';
import { NetnsServers } from '../../../support/netns-servers';

// The policy tests' node: a node namespace routing between three pod namespaces a, b and c, each on
// its own veth (host side pa, pb, pc), dual-stack: pod x at 10.77.<n>.5 and fd77:<n>::5, the node at .1
// and ::1 of each. Every pod runs echo servers (TCP and UDP, ports 80-82, both families), and a probe
// says which of a list of flows get an answer.

export interface HostPolicyNode {
  node: TestNamespace;
  pods: Record<'a' | 'b' | 'c', TestNamespace>;
}

export const POD_INDEX = { a: 1, b: 2, c: 3 } as const;
export type PodName = keyof typeof POD_INDEX;
export const v4 = (p: PodName): string => `10.77.${POD_INDEX[p]}.5`;
export const v6 = (p: PodName): string => `fd77:${POD_INDEX[p]}::5`;
export const hostIf = (p: PodName): string => `p${p}`;

const ip = (ns: string, ...args: string[]): void => void execFileSync('ip', ['-n', ns, ...args]);

export function hostPolicyNode(nss: NetnsSet): HostPolicyNode {
  const node = nss.add('node');
  const pods = { a: nss.add('a'), b: nss.add('b'), c: nss.add('c') };
  ip(node.name, 'link', 'set', 'lo', 'up');
  const sysctl = (k: string): void =>
    void execFileSync('ip', ['netns', 'exec', node.name, 'sysctl', '-qw', k]);
  sysctl('net.ipv4.ip_forward=1');
  sysctl('net.ipv6.conf.all.forwarding=1');
  for (const name of Object.keys(pods) as PodName[]) {
    const pod = pods[name];
    const n = POD_INDEX[name];
    ip(pod.name, 'link', 'set', 'lo', 'up');
    ip(node.name, 'link', 'add', hostIf(name), 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name);
    ip(node.name, 'addr', 'add', `10.77.${n}.1/24`, 'dev', hostIf(name));
    ip(node.name, 'addr', 'add', `fd77:${n}::1/64`, 'dev', hostIf(name), 'nodad');
    ip(node.name, 'link', 'set', hostIf(name), 'up');
    ip(pod.name, 'addr', 'add', `${v4(name)}/24`, 'dev', 'eth0');
    ip(pod.name, 'addr', 'add', `${v6(name)}/64`, 'dev', 'eth0', 'nodad');
    ip(pod.name, 'link', 'set', 'eth0', 'up');
    ip(pod.name, 'route', 'add', 'default', 'via', `10.77.${n}.1`);
    ip(pod.name, '-6', 'route', 'add', 'default', 'via', `fd77:${n}::1`);
  }
  return { node, pods };
}

const SERVER = `
const net = require('net'), dgram = require('dgram');
let up = 0;
const ready = () => { if (++up === 6) console.log('up'); };
for (const port of [80, 81, 82]) {
  net.createServer((s) => { s.on('error', () => undefined); s.end('ok'); }).listen({ port, host: '::', ipv6Only: false }, ready);
  const u = dgram.createSocket({ type: 'udp6', ipv6Only: false });
  u.on('message', (m, r) => u.send('ok', r.port, r.address, () => undefined));
  u.bind(port, '::', ready);
}`;

/** Echo servers in every namespace given, until stopped. */
export class EchoServers extends NetnsServers {
  start(ns: TestNamespace): Promise<void> {
    return this.run(ns.name, SERVER, `echo servers in ${ns.name}`);
  }
}

export interface Flow {
  proto: 'tcp' | 'udp';
  host: string;
  port: number;
}

const CLIENT = `
const net = require('net'), dgram = require('dgram');
const [flows, repeatMs, waitMs] = JSON.parse(process.argv[1]);
const one = (f) => new Promise((resolve) => {
  const done = (ok) => { clearTimeout(t); try { s.destroy ? s.destroy() : s.close(); } catch {} resolve(ok); };
  const t = setTimeout(() => done(false), waitMs);
  let s;
  if (f.proto === 'tcp') {
    s = net.connect(f.port, f.host);
    s.on('data', () => done(true));
    s.on('error', () => done(false));
  } else {
    s = dgram.createSocket(f.host.includes(':') ? 'udp6' : 'udp4');
    s.on('message', () => done(true));
    s.on('error', () => done(false));
    s.send('hi', f.port, f.host);
  }
});
(async () => {
  const counts = flows.map(() => ({ ok: 0, failed: 0 }));
  const end = Date.now() + repeatMs;
  do {
    const r = await Promise.all(flows.map(one));
    r.forEach((ok, i) => counts[i][ok ? 'ok' : 'failed']++);
  } while (Date.now() < end);
  process.stdout.write(JSON.stringify(counts));
})();`;

/** How many attempts of each flow from `ns` got an answer, repeating for `repeatMs` (0: once). */
export function probe(
  ns: TestNamespace,
  flows: Flow[],
  opts: { repeatMs?: number; waitMs?: number } = {},
): Promise<{ ok: number; failed: number }[]> {
  const arg = JSON.stringify([flows, opts.repeatMs ?? 0, opts.waitMs ?? 700]);
  return new Promise((resolve, reject) =>
    execFile('ip', ['netns', 'exec', ns.name, process.execPath, '-e', CLIENT, arg], (err, out, stderr) =>
      err
        ? reject(new Error(`probe from ${ns.name} failed: ${stderr || err.message}`))
        : resolve(JSON.parse(out)),
    ),
  );
}

/** Whether each flow from `ns` gets an answer (one attempt each). */
export async function reaches(ns: TestNamespace, flows: Flow[]): Promise<boolean[]> {
  return (await probe(ns, flows)).map((c) => c.ok > 0);
}

/** The kernel's listing of the policy table in `ns` (text, with handles). */
export function listTable(ns: TestNamespace): string {
  return execFileSync(
    'ip',
    ['netns', 'exec', ns.name, 'nft', '-a', 'list', 'table', 'inet', 'workloadnet_policy'],
    {
      encoding: 'utf8',
    },
  );
}
