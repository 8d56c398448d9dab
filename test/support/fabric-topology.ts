// A small underlay of test-owned namespaces for the fabric tests: two bridges (two subnets) in one
// "underlay" namespace, a router namespace joining them, and "node" namespaces with an uplink on one
// of the bridges, a default route through the router and a pod attached by the Linux backend. Built
// and inspected with ip(8), which only test code uses.

import { execFile, execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { promisify } from 'node:util';
import type { Peer } from '../../core/peer-source';
import type { FabricSettings, LocalNode } from '../../core/fabric-dataplane';
import type { IpAssignment } from '../../core/backend';
import { vtepMac } from '../../lib/vtep-mac';
import { LinuxBackend } from '../../backends/linux/linux-backend';
import { CLI } from './daemon-process';
import { NetnsSet, netnsPath } from './netns';
import { ip, ipJson, netnsInode } from './netns-fixture';
import { attachTo, testSpec } from './attach-spec';

const run = promisify(execFile);

export interface TopologyNode {
  /** Node name, as peers know it. */
  name: string;
  ns: string;
  /** Underlay address. */
  address: string;
  /** The node's pod range and the one pod in it. */
  prefix: string;
  /** Every prefix the node announces (with `v6`, also fd10:0:<n>::/64). */
  prefixes: string[];
  pod: string;
  podIp: string;
  /** The pod's IPv6 address, on a dual-stack node. */
  podIp6?: string;
  backend: LinuxBackend;
}

export interface NodeSpec {
  name: string;
  /** 1 or 2: which underlay subnet (10.100.<subnet>.0/24). */
  subnet: 1 | 2;
  host: number;
  /** Third octet of the node's pod range 10.244.<n>.0/24. */
  podRange: number;
  /** Dual-stack pods: an IPv6 address from fd10:0:<podRange>::/64 too. */
  v6?: boolean;
}

/** A node of the underlay without a backend or a pod: a daemon of the test's runs there. */
export interface BareNode {
  name: string;
  ns: string;
  address: string;
}

export const POD_MTU = 1450;

/** `bridge` run in a namespace (test inspection only). */
export async function bridge(ns: string, ...args: string[]): Promise<string> {
  const { stdout } = await run('bridge', ['-n', ns, ...args], { encoding: 'utf8' });
  return stdout;
}

async function sysctl(ns: string, key: string, value: string): Promise<void> {
  await run('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', `${key}=${value}`]);
}

export class FabricTopology {
  readonly pool = new NetnsSet('wnf-');
  readonly nodes: TopologyNode[] = [];
  underlay = '';
  router = '';

  async build(specs: NodeSpec[]): Promise<void> {
    this.underlay = this.pool.add('ul').name;
    this.router = this.pool.add('rt').name;
    for (const br of ['br1', 'br2']) {
      await ip('-n', this.underlay, 'link', 'add', br, 'type', 'bridge');
      await ip('-n', this.underlay, 'link', 'set', br, 'up');
    }
    await ip('-n', this.router, 'link', 'set', 'lo', 'up');
    await sysctl(this.router, 'net.ipv4.ip_forward', '1');
    for (const subnet of [1, 2]) {
      await this.plug(this.router, `r${subnet}`, `br${subnet}`, `rt${subnet}`);
      await ip('-n', this.router, 'addr', 'add', `10.100.${subnet}.254/24`, 'dev', `r${subnet}`);
    }
    for (const s of specs) await this.addNode(s);
  }

  /** A veth from `ns` (named `inside`) to a port of `br` in the underlay namespace. */
  private async plug(ns: string, inside: string, br: string, port: string): Promise<void> {
    await ip('-n', ns, 'link', 'add', inside, 'type', 'veth', 'peer', 'name', port, 'netns', this.underlay);
    await ip('-n', this.underlay, 'link', 'set', port, 'master', br, 'up');
    await ip('-n', ns, 'link', 'set', inside, 'up');
  }

  /** A node namespace on the underlay: uplink eth0 on its subnet's bridge, default route via the router. */
  async addBareNode(s: Pick<NodeSpec, 'name' | 'subnet' | 'host'>): Promise<BareNode> {
    const ns = this.pool.add(s.name).name;
    await ip('-n', ns, 'link', 'set', 'lo', 'up');
    await this.plug(ns, 'eth0', `br${s.subnet}`, `p-${s.name}`);
    const address = `10.100.${s.subnet}.${s.host}`;
    await ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
    await ip('-n', ns, 'route', 'add', 'default', 'via', `10.100.${s.subnet}.254`);
    return { name: s.name, ns, address };
  }

  async addNode(s: NodeSpec): Promise<TopologyNode> {
    const { ns, address } = await this.addBareNode(s);
    const backend = new LinuxBackend({
      hostNetnsPath: netnsPath(ns),
      netlinkThread: false,
      ipv6: s.v6 ?? false,
    });
    await backend.start();
    const pod = this.pool.add(`${s.name}pod`).name;
    const podIp = `10.244.${s.podRange}.5`;
    const podIp6 = s.v6 ? `fd10:0:${s.podRange}::5` : undefined;
    const ips: IpAssignment[] = [{ family: 4, address: podIp, gateway: '169.254.1.1' }];
    if (podIp6 !== undefined) ips.push({ family: 6, address: podIp6, gateway: 'fe80::1' });
    await attachTo(
      backend,
      testSpec(`${s.name}-pod`, { path: netnsPath(pod), inode: netnsInode(pod) }, ips, { mtu: POD_MTU }),
    );
    const node: TopologyNode = {
      name: s.name,
      ns,
      address,
      prefix: `10.244.${s.podRange}.0/24`,
      prefixes: [`10.244.${s.podRange}.0/24`, ...(s.v6 ? [`fd10:0:${s.podRange}::/64`] : [])],
      pod,
      podIp,
      podIp6,
      backend,
    };
    this.nodes.push(node);
    return node;
  }

  node(name: string): TopologyNode {
    const n = this.nodes.find((x) => x.name === name);
    if (!n) throw new Error(`no node ${name}`);
    return n;
  }

  /** What each other node would publish, from what its dataplane found at prepare(). */
  peersOf(self: string, locals: ReadonlyMap<string, LocalNode>): Peer[] {
    return this.nodes
      .filter((n) => n.name !== self)
      .map((n) => {
        const local = locals.get(n.name);
        return {
          node: n.name,
          underlay: local?.underlay ?? [n.address],
          mtu: local?.mtu ?? 1500,
          vtep: local?.vtep,
          bootId: '',
          prefixes: n.prefixes,
        };
      });
  }

  async cleanup(): Promise<void> {
    for (const n of this.nodes) await n.backend.stop();
    this.pool.cleanup();
  }
}

export const CLUSTER = '10.244.0.0/16';

export function settings(mode: FabricSettings['mode'], over: Partial<FabricSettings> = {}): FabricSettings {
  return { mode, nodeIp: '', vni: 30574, port: 4789, clusterCidrs: [CLUSTER], ...over };
}

/** Our objects in a node namespace, as an operator would list them. */
export async function kernelState(ns: string): Promise<{ routes: string[]; neigh: string[]; fdb: string[] }> {
  const lines = (s: string): string[] =>
    s
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .sort();
  const hasVxlan = (await ipJson(ns, 'link', 'show', 'wn-vxlan').catch(() => [])).length > 0;
  return {
    routes: lines(await ip('-n', ns, 'route', 'show', 'proto', '119')),
    neigh: hasVxlan ? lines(await ip('-n', ns, 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent')) : [],
    fdb: hasVxlan ? lines(await bridge(ns, 'fdb', 'show', 'dev', 'wn-vxlan')) : [],
  };
}

/** ping once from a namespace; its whole output and exit status (for "fails fast, and why"). */
export function pingOutput(
  ns: string,
  to: string,
  waitSeconds: number,
): Promise<{ ok: boolean; out: string; ms: number }> {
  const started = Date.now();
  return new Promise((resolve) =>
    execFile(
      'ip',
      ['netns', 'exec', ns, 'ping', '-c', '1', '-W', String(waitSeconds), to],
      (err, stdout, stderr) =>
        resolve({ ok: err === null, out: `${stdout}${stderr}`, ms: Date.now() - started }),
    ),
  );
}

export async function vxlanTxPackets(ns: string): Promise<number> {
  const [link] = await ipJson<{ stats64: { tx: { packets: number } } }>(ns, '-s', 'link', 'show', 'wn-vxlan');
  return link?.stats64.tx.packets ?? 0;
}

/** One peer of a peers file (docs/fabric.md), as a daemon of this underlay publishes itself. */
export interface PeersFileEntry {
  node: string;
  underlay: string[];
  mtu: number;
  vtep: { mac: string; vni: number; port: number };
  prefixes: string[];
  bootId: string;
}

/** The entry for a node at `address` owning `prefixes`, with the VTEP its daemon derives. */
export function peersFileEntry(node: string, address: string, prefixes: string[]): PeersFileEntry {
  return {
    node,
    underlay: [address],
    mtu: 1500,
    vtep: { mac: vtepMac(address), vni: 30574, port: 4789 },
    prefixes,
    bootId: '',
  };
}

/** Replaces a peers file at once (written aside, then renamed), as a config manager would. */
export function writePeersFile(file: string, peers: PeersFileEntry[]): void {
  fs.writeFileSync(`${file}.tmp`, JSON.stringify({ peers }));
  fs.renameSync(`${file}.tmp`, file);
}

/** Our fabric routes in a node namespace (protocol 119), sorted. */
export function fabricRoutes(ns: string): string[] {
  return execFileSync('ip', ['-n', ns, 'route', 'show', 'proto', '119'], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .sort();
}

/** What a daemon says of its peers (`workloadnet peers --json`), asked on its API socket. */
export interface PeersView {
  peers: Array<{ node: string; path: string; prefixes: string[]; withdrawnAt?: string }>;
  warnings: string[];
  /** Packets the VXLAN source filter dropped, once the filter is in place. */
  filteredPackets?: number;
}

export function peersView(apiSocket: string): PeersView {
  const out = execFileSync(process.execPath, [CLI, 'peers', '--json', '--socket', apiSocket], {
    encoding: 'utf8',
  });
  return JSON.parse(out) as PeersView;
}

/** The peers a daemon shows (`workloadnet peers --json`), asked on its API socket. */
export function peersOf(apiSocket: string): PeersView['peers'] {
  return peersView(apiSocket).peers;
}
