import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { attachRequest } from './attach-request';
import { DaemonProcess } from './daemon-process';
import type { NetnsSet, TestNamespace } from './netns';
import { NetnsProber, type ProbeProtocol } from './netns-prober';
import type { StandInKubeApiServer } from './standin-kube-apiserver';
import type { StandInPort } from './standin-kube-policy-kinds';
import { waitUntil } from './wait-until';

// One node under NetworkPolicy, as the tests drive it: a test-owned node namespace, the real daemon
// (Linux backend, the Kubernetes source: a stand-in API server) programming it, and pods attached
// through the workload API with their identity, as a CNI ADD gives it. Each pod's namespace runs a
// prober that serves the ports the cases probe and probes others, so a matrix costs no process start.

/** The ports every pod serves, as the upstream e2e's pods do. */
export const SERVED_PORTS = [80, 81] as const;
export const CONTAINER_PORTS: StandInPort[] = [
  { name: 'serve-80-tcp', containerPort: 80, protocol: 'TCP' },
  { name: 'serve-80-udp', containerPort: 80, protocol: 'UDP' },
  { name: 'serve-81-tcp', containerPort: 81, protocol: 'TCP' },
  { name: 'serve-81-udp', containerPort: 81, protocol: 'UDP' },
];

export interface PolicyPodHandle {
  namespace: string;
  name: string;
  netns: TestNamespace;
  ip: string;
  prober: NetnsProber;
}

export interface PolicyNodeOptions {
  root: string;
  name: string;
  /** The Node's podCIDR. */
  range: string;
  namespaces: NetnsSet;
  api: StandInKubeApiServer;
  /** More daemon flags (by name, without dashes). */
  flags?: Record<string, string>;
  /** A config file for the daemon. */
  config?: object;
}

export class PolicyNode {
  readonly pods = new Map<string, PolicyPodHandle>();
  daemon!: DaemonProcess;
  readonly ns: TestNamespace;

  private constructor(private readonly opts: PolicyNodeOptions) {
    // An address and a default route, as a node has: the pods' link-local gateway is answered only
    // by a node with a route to it, and the node's own probes leave from that address.
    this.ns = opts.namespaces.addNode('192.0.2.10');
    execFileSync('ip', ['netns', 'exec', this.ns.name, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    opts.api.setNode(opts.name, [opts.range]);
  }

  static async start(opts: PolicyNodeOptions): Promise<PolicyNode> {
    const node = new PolicyNode(opts);
    await node.startDaemon();
    return node;
  }

  /** Starts the daemon (again, after a kill; with another config if given) and waits until it is ready. */
  async startDaemon(config = this.opts.config): Promise<void> {
    this.daemon = await DaemonProcess.start({
      dir: path.join(this.opts.root, this.opts.name),
      config,
      flags: {
        'pool-source': 'kubernetes',
        kubeconfig: this.opts.api.kubeconfig(),
        'node-name': this.opts.name,
        'host-netns': this.ns.path,
        fabric: 'off',
        'network-policy': 'on',
        ...this.opts.flags,
      },
    });
    await waitUntil(async () => (await this.daemon.client.status()).ready, 'the daemon to be ready', 30_000, {
      intervalMs: 100,
    });
  }

  /**
   * A pod as the kubelet makes one: the Pod in the API first (no address yet), then its sandbox
   * attached with its identity, then its address reported in status.podIPs; its prober serving.
   */
  async addPod(namespace: string, name: string, labels: Record<string, string>): Promise<PolicyPodHandle> {
    const uid = `uid-${namespace}-${name}`;
    const pod = { namespace, name, uid, labels, ports: CONTAINER_PORTS, nodeName: this.opts.name };
    this.opts.api.putPod(pod);
    const netns = this.opts.namespaces.add(`${namespace}-${name}`);
    execFileSync('ip', ['-n', netns.name, 'link', 'set', 'lo', 'up']);
    const res = await this.daemon.client.call(
      this.daemon.client.raw.attach,
      attachRequest(`${namespace}_${name}`, netns.path, 'eth0', { pod: { namespace, name, uid } }),
    );
    const ip = (res.ips[0]?.cidr ?? '').split('/')[0] ?? '';
    this.opts.api.putPod({ ...pod, ips: [ip] });
    const prober = new NetnsProber(netns.name, `${namespace}/${name}`);
    await prober.start([...SERVED_PORTS], [...SERVED_PORTS]);
    const handle = { namespace, name, netns, ip, prober };
    this.pods.set(`${namespace}/${name}`, handle);
    return handle;
  }

  /** The daemon's API socket, for the CLI. */
  get socket(): string {
    return path.join(this.opts.root, this.opts.name, 'api.sock');
  }

  pod(key: string): PolicyPodHandle {
    const p = this.pods.get(key);
    if (!p) throw new Error(`no pod ${key} on ${this.opts.name}`);
    return p;
  }

  /** Whether `from` reaches `to` on port/protocol now (one probe). */
  async reaches(
    from: string,
    to: string,
    port: number,
    protocol: ProbeProtocol,
    timeoutMs = 400,
  ): Promise<boolean> {
    const answer = await this.pod(from).prober.probe({ host: this.pod(to).ip, port, protocol, timeoutMs });
    return answer.ok && answer.text === to;
  }

  stop(): void {
    for (const p of this.pods.values()) p.prober.stop();
  }
}

/** One probe of a matrix: `from` → `to` on port/protocol. */
export interface ProbeCell {
  from: string;
  to: string;
  port: number;
  protocol: ProbeProtocol;
}

export function cellKey(c: ProbeCell): string {
  return `${c.from} -> ${c.to} ${c.port}/${c.protocol}`;
}

/**
 * Probes every cell (all at once, each on its own socket) and lists the cells whose outcome is not the
 * expected one; probes again, up to `deadlineMs`, while there are any: a change reaches the kernel a
 * few milliseconds after the API has it, as with any CNI, so a matrix is read once it has settled.
 */
export async function mismatches(
  node: PolicyNode,
  cells: readonly ProbeCell[],
  expected: (c: ProbeCell) => boolean,
  deadlineMs = 10_000,
): Promise<string[]> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const outcomes = await Promise.all(cells.map((c) => node.reaches(c.from, c.to, c.port, c.protocol)));
    const wrong = cells
      .filter((c, i) => outcomes[i] !== expected(c))
      .map(
        (c) =>
          `${cellKey(c)}: ${expected(c) ? 'expected allowed, was denied' : 'expected denied, was allowed'}`,
      );
    if (wrong.length === 0 || Date.now() > until) return wrong;
    await new Promise((r) => setTimeout(r, 200));
  }
}
