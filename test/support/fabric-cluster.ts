import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { AttachResponse, StatusResponse } from '../../proto/gen/workloadnet/v1/workload';
import {
  CLUSTER,
  FabricTopology,
  fabricRoutes,
  peersFileEntry,
  peersOf,
  peersView,
  writePeersFile,
  type BareNode,
  type PeersFileEntry,
} from './fabric-topology';
import { SimulatedDpu, type DpuSpec } from './simulated-dpu';
import { EtcdCluster } from './etcd-cluster';
import { StandInKubeApiServer } from './standin-kube-apiserver';
import { attachRequest } from './attach-request';
import { DaemonProcess, type DaemonProcessOptions } from './daemon-process';
import { pings } from './ping';
import { waitUntil } from './wait-until';

// A fabric cluster of real daemons for the integration tests: node namespaces on the test underlay
// (fabric-topology.ts), one daemon per node taking its ranges and peers from one source (a real etcd,
// the stand-in Kubernetes API, or a peers file per node), simulated DPUs for the nodes that run the DPU
// backend (simulated-dpu.ts), and pods attached through each daemon's API.
// Its own file because every fabric integration suite needs the same cluster and the same teardown;
// written once, a suite says only what makes its cluster different.

export type PeerSourceKind = 'etcd' | 'kubernetes' | 'static';
export type FabricMode = 'hybrid' | 'vxlan' | 'routed' | 'off';

export interface ClusterNodeSpec {
  name: string;
  /** Which underlay subnet (10.100.<subnet>.0/24) the node's uplink is on. */
  subnet: 1 | 2;
  host: number;
  /** Third octet of the node's pod range 10.244.<range>.0/24: its Node's podCIDRs, or its --pod-cidr. */
  range?: number;
  /** Daemon flags of this node's over the cluster's (given the cluster, e.g. for its etcd endpoints). */
  flags?: (cluster: FabricCluster) => Record<string, string>;
  /** Simulated DPUs on the node's subnet: its daemon runs the DPU backend and serves them. */
  dpus?: DpuSpec[];
  /** false: a peer only, in the others' peers files, with no daemon of its own. */
  daemon?: boolean;
}

export interface FabricClusterOptions {
  source: PeerSourceKind;
  nodes: ClusterNodeSpec[];
  fabric: FabricMode;
  /** --mtu for every daemon; without it the daemon derives the pod MTU from the fabric. */
  mtu?: number;
  /** The daemons' --config file, as an object. */
  config?: object;
  /** Members of the etcd cluster (3 unless given). */
  etcdMembers?: number;
  /** Daemon flags for every node, over the source's. */
  flags?: Record<string, string>;
  /** Daemon arguments after the flags, for every node (a second --cluster-cidr). */
  args?: string[];
  /** Pods attached on each node once every daemon runs (none unless given). */
  podsPerNode?: number;
  /** Runs for each node once its namespace exists, before any daemon starts (uplink MTU, sysctls). */
  prepare?: (node: ClusterNode) => void | Promise<void>;
  /** More peers in every node's peers file, with the static source (a large peer table). */
  peers?: PeersFileEntry[];
  /** How long a daemon and its DPUs may take to come up (20 s and 10 s unless given). */
  startTimeoutMs?: number;
}

export interface ClusterPod {
  /** The pod's namespace name, for ip(8) and ping. */
  ns: string;
  /** Its first address, and every address the daemon gave it. */
  ip: string;
  ips: string[];
  /** The MTU the Attach answer gave its interface. */
  mtu: number;
  /** The workload id it was attached under, and the DPU it was attached behind. */
  workload: string;
  dpu?: string;
}

export interface ClusterNode extends BareNode {
  range?: number;
  /** The daemon's directory: sockets, state, log. */
  dir: string;
  /** Its API socket. */
  api: string;
  /** The node's peers file, with the static source. */
  peersFile?: string;
  /** The running daemon; undefined once stopped. */
  daemon?: DaemonProcess;
  dpus: SimulatedDpu[];
  pods: ClusterPod[];
}

/** The usual places on the underlay: na and nb share subnet 1, nc sits behind the router on subnet 2. */
const PLACES = {
  na: { subnet: 1, host: 1 },
  nb: { subnet: 1, host: 2 },
  nc: { subnet: 2, host: 3 },
} as const;

/** Nodes at their usual places, each with what the suite adds (its range, its flags), in the order given. */
export function usualNodes(
  nodes: Partial<Record<keyof typeof PLACES, Omit<ClusterNodeSpec, 'name' | 'subnet' | 'host'>>>,
): ClusterNodeSpec[] {
  return Object.entries(nodes).map(([name, more]) => ({
    name,
    ...PLACES[name as keyof typeof PLACES],
    ...more,
  }));
}

/** The DPU suites' cluster: etcd, the overlay over VXLAN, pods at 1450, a short lease and grace. */
export const ETCD_VXLAN = {
  source: 'etcd',
  fabric: 'vxlan',
  mtu: 1450,
  config: { fabric: { leaseTtlSeconds: 2, withdrawGraceSeconds: 10 } },
} as const;

/** The cluster most suites start from: peers files, hybrid mode, pods at 1450. */
export const STATIC_HYBRID = { source: 'static', fabric: 'hybrid', mtu: 1450 } as const;

/** How long teardown lets a daemon stop on SIGTERM before it kills it. */
const STOP_GRACE_MS = 10_000;

export class FabricCluster {
  readonly topo = new FabricTopology();
  readonly nodes: ClusterNode[] = [];
  etcd?: EtcdCluster;
  kube?: StandInKubeApiServer;
  private configFile?: string;

  private constructor(
    readonly opts: FabricClusterOptions,
    /** A temporary directory the cluster owns: daemons' directories, etcd's data, the config. */
    readonly root: string,
  ) {}

  /** Builds the underlay and the source, starts every daemon and attaches `podsPerNode` pods on each. */
  static async start(opts: FabricClusterOptions): Promise<FabricCluster> {
    const c = new FabricCluster(opts, fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabric-')));
    try {
      await c.build();
    } catch (err) {
      await c.teardown();
      throw err;
    }
    return c;
  }

  private async build(): Promise<void> {
    const { opts } = this;
    if (opts.config !== undefined) {
      this.configFile = path.join(this.root, 'config.json');
      fs.writeFileSync(this.configFile, JSON.stringify(opts.config));
    }
    if (opts.source === 'etcd')
      this.etcd = await EtcdCluster.start(path.join(this.root, 'etcd'), opts.etcdMembers ?? 3, 'wn-fabric-');
    if (opts.source === 'kubernetes')
      this.kube = await StandInKubeApiServer.start(path.join(this.root, 'api'));
    await this.topo.build([]);
    for (const spec of opts.nodes) {
      const bare = await this.topo.addBareNode(spec);
      const dir = path.join(this.root, spec.name);
      const n: ClusterNode = {
        ...bare,
        range: spec.range,
        dir,
        api: path.join(dir, 'api.sock'),
        dpus: [],
        pods: [],
      };
      this.nodes.push(n);
      for (const d of spec.dpus ?? []) await this.addDpu(n, d);
    }
    for (const n of this.nodes) this.publish(n);
    for (const n of this.nodes) await opts.prepare?.(n);
    for (const n of this.nodes) if (this.spec(n).daemon !== false) await this.startDaemon(n);
    for (const n of this.nodes)
      for (const d of n.dpus) await d.connect(undefined, undefined, opts.startTimeoutMs);
    for (const n of this.nodes)
      for (let i = 1; i <= (opts.podsPerNode ?? 0); i++)
        await this.attachPod(n, opts.podsPerNode === 1 ? 'pod' : `p${i}`);
  }

  /** Makes a node known to its peers before its daemon starts: its Node object, or the peers files. */
  private publish(n: ClusterNode): void {
    if (this.opts.source === 'kubernetes') {
      this.kube?.setNode(n.name, [podRange(n)]);
      this.kube?.setAddresses(n.name, [{ type: 'InternalIP', address: n.address }]);
    }
    if (this.opts.source === 'static') {
      n.peersFile = path.join(n.dir, 'peers.json');
      fs.mkdirSync(n.dir, { recursive: true });
      this.writePeers(
        n,
        this.nodes.filter((o) => o !== n),
      );
    }
  }

  private spec(n: ClusterNode): ClusterNodeSpec {
    const spec = this.opts.nodes.find((s) => s.name === n.name);
    if (!spec) throw new Error(`no node ${n.name} in the cluster's options`);
    return spec;
  }

  node(name: string): ClusterNode {
    const n = this.nodes.find((x) => x.name === name);
    if (!n) throw new Error(`no node ${name} in the cluster`);
    return n;
  }

  /** A pod attached on a node (its first unless `i` says). */
  pod(name: string, i = 0): ClusterPod {
    const p = this.node(name).pods[i];
    if (!p) throw new Error(`node ${name} has no pod ${i}`);
    return p;
  }

  /** The daemon of a node as it runs: its namespace, its source's flags, the cluster's and its own. */
  private daemonOptions(n: ClusterNode, over: Record<string, string>): DaemonProcessOptions {
    const { opts } = this;
    const flags: Record<string, string> = { fabric: opts.fabric };
    if (opts.mtu !== undefined) flags.mtu = String(opts.mtu);
    if (this.configFile !== undefined) flags.config = this.configFile;
    const hostNetns = { 'node-name': n.name, 'host-netns': `/var/run/netns/${n.ns}` };
    let netns: string | undefined = n.ns;
    let args: string[] = [];
    if (this.etcd) {
      // Beside the etcd members (it reaches them on that namespace's loopback), programming its node.
      netns = this.etcd.netns;
      Object.assign(flags, hostNetns, {
        'pool-source': 'etcd',
        'etcd-endpoints': this.etcd.endpoints.join(','),
      });
      args = ['--cluster-cidr', CLUSTER];
    } else if (this.kube) {
      // Beside the stand-in API server (on the test's loopback), programming its node.
      netns = undefined;
      Object.assign(flags, hostNetns, { 'pool-source': 'kubernetes', kubeconfig: this.kube.kubeconfig() });
    } else {
      Object.assign(flags, { 'pod-cidr': podRange(n), 'peers-file': n.peersFile ?? '' });
    }
    if (n.dpus.length > 0) Object.assign(flags, { backend: 'dpu', 'agent-socket': n.dpus[0]?.socket ?? '' });
    return {
      dir: n.dir,
      netns,
      flags: { ...flags, ...opts.flags, ...this.spec(n).flags?.(this), ...over },
      args: [...args, ...(opts.args ?? [])],
    };
  }

  /** Starts a node's daemon (stopped or never started), with `flags` over its usual ones this time. */
  async startDaemon(n: ClusterNode, flags: Record<string, string> = {}): Promise<DaemonProcess> {
    if (n.daemon) throw new Error(`${n.name}'s daemon already runs`);
    const within = this.opts.startTimeoutMs;
    if (within === undefined) {
      n.daemon = await DaemonProcess.start(this.daemonOptions(n, flags));
      return n.daemon;
    }
    // Launched, and given longer than start's 20 s to answer past its start-up (a large peer table).
    const d = (n.daemon = DaemonProcess.launch(this.daemonOptions(n, flags)));
    await waitUntil(
      async () => (await d.client.status({ omitFabricPeers: true })).reconcile !== undefined,
      `${n.name}'s daemon answering past its start`,
      within,
      { intervalMs: 200, retryOnError: true },
    );
    return d;
  }

  /** Sends a signal to a node's daemon (SIGSTOP, SIGCONT: a debugger, the cgroup freezer). */
  signal(n: ClusterNode, signal: NodeJS.Signals): void {
    const pid = n.daemon?.child.pid;
    if (pid === undefined) throw new Error(`${n.name} has no daemon running`);
    process.kill(pid, signal);
  }

  /** Stops a node's daemon (SIGTERM unless told), and waits until it has exited. */
  async stop(n: ClusterNode, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const d = n.daemon;
    n.daemon = undefined;
    await d?.kill(signal);
  }

  /** Stops a node's daemon and starts it again, with `flags` over its usual ones this time. */
  async restart(n: ClusterNode, flags: Record<string, string> = {}): Promise<DaemonProcess> {
    await this.stop(n);
    return this.startDaemon(n, flags);
  }

  /**
   * Attaches a pod through the node's daemon, behind `dpu` if given. With etcd or Kubernetes the daemon
   * may not hold a range yet (a block claimed, a Node read), and a DPU may not have a slice yet: Attach
   * is tried again until it answers. With a peers file and no DPU the range is given at start, so the
   * first answer counts.
   */
  async attachPod(n: ClusterNode, id = 'pod', dpu?: string): Promise<ClusterPod> {
    const ns = this.topo.pool.add(`${n.name}${id}`);
    const workload = `${n.name}-${id}`;
    const attach = (): Promise<AttachResponse> => {
      const d = n.daemon;
      if (!d) throw new Error(`${n.name} has no daemon running`);
      return d.client.call(d.client.raw.attach, attachRequest(workload, ns.path, 'eth0', { dpu: dpu ?? '' }));
    };
    let res: AttachResponse | undefined;
    if (this.opts.source === 'static' && n.dpus.length === 0) res = await attach();
    else
      await waitUntil(
        async () => {
          res = await attach();
          return true;
        },
        `${n.name} attaches pod ${id} once it holds a range`,
        60_000,
        { intervalMs: 200, retryOnError: true },
      );
    const ips = (res?.ips ?? []).map((x) => (x.cidr ?? '').split('/')[0] ?? '');
    const mtu = res?.interfaces[0]?.mtu ?? 0;
    const pod: ClusterPod = { ns: ns.name, ip: ips[0] ?? '', ips, mtu, workload, dpu };
    n.pods.push(pod);
    return pod;
  }

  /** A node's Status, asked of its daemon. */
  status(n: ClusterNode): Promise<StatusResponse> {
    if (!n.daemon) throw new Error(`${n.name} has no daemon running`);
    return n.daemon.client.status();
  }

  /** Waits until every node's daemon says its fabric is ready. */
  async fabricReady(timeoutMs = 60_000): Promise<void> {
    for (const n of this.nodes.filter((x) => x.daemon))
      await waitUntil(
        async () => (await this.status(n)).fabric?.ready === true,
        `${n.name}'s fabric ready`,
        timeoutMs,
        {
          intervalMs: 200,
        },
      );
  }

  /** Adds a DPU's namespace to a node's subnet; its simulator starts when the test says. */
  async addDpu(n: ClusterNode, spec: DpuSpec): Promise<SimulatedDpu> {
    const d = await SimulatedDpu.add(this.topo, this.spec(n).subnet, spec, n);
    n.dpus.push(d);
    return d;
  }

  /** A DPU of the cluster, by name. */
  dpu(name: string): SimulatedDpu {
    const d = this.nodes.flatMap((n) => n.dpus).find((x) => x.name === name);
    if (!d) throw new Error(`no DPU ${name} in the cluster`);
    return d;
  }

  /** The peers a node's daemon shows (`workloadnet peers --json`). */
  peersOf(n: ClusterNode): ReturnType<typeof peersOf> {
    return peersOf(n.api);
  }

  /** The whole of what `workloadnet peers --json` says on a node: its peers, warnings and counters. */
  peersView(n: ClusterNode): ReturnType<typeof peersView> {
    return peersView(n.api);
  }

  /** Waits until a node's namespace holds `count` of our fabric routes. */
  async waitForRoutes(n: ClusterNode, count: number, timeoutMs = 30_000): Promise<void> {
    await waitUntil(
      async () => this.routes(n).length === count,
      `${n.name} holds ${count} fabric routes`,
      timeoutMs,
      {
        intervalMs: 200,
      },
    );
  }

  /** Every pair of nodes whose first pods do not answer each other's ping: `from → to`. */
  async silentPairs(): Promise<string[]> {
    const silent: string[] = [];
    for (const from of this.nodes)
      for (const to of this.nodes)
        if (
          from !== to &&
          !(await pings(this.pod(from.name).ns, this.pod(to.name).ip, { count: 3, waitSeconds: 2 }))
        )
          silent.push(`${from.name} → ${to.name}`);
    return silent;
  }

  /** Our fabric routes in a node's namespace, sorted. */
  routes(n: ClusterNode): string[] {
    return fabricRoutes(n.ns);
  }

  /** Replaces a node's peers file with entries for `others`, as a config manager would. */
  writePeers(n: ClusterNode, others: ClusterNode[]): void {
    if (!n.peersFile)
      throw new Error(`${n.name} has no peers file: the cluster's source is ${this.opts.source}`);
    writePeersFile(n.peersFile, [
      ...others.map((o) => peersFileEntry(o.name, o.address, [podRange(o)])),
      ...(this.opts.peers ?? []),
    ]);
  }

  /**
   * Kills every DPU's simulator, stops every daemon (killed if SIGTERM is not enough), deletes every
   * namespace, stops the source and removes the cluster's directory. Each step runs whatever the one
   * before did; twice is harmless.
   */
  async teardown(): Promise<void> {
    await Promise.all(this.nodes.flatMap((n) => n.dpus.map((d) => d.stop())));
    await Promise.all(this.nodes.map((n) => stopWithin(n, STOP_GRACE_MS)));
    await this.topo.cleanup().catch(() => this.topo.pool.cleanup());
    await this.kube?.stop().catch(() => undefined);
    await this.etcd?.stop().catch(() => undefined);
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}

function podRange(n: { name: string; range?: number }): string {
  if (n.range === undefined) throw new Error(`node ${n.name} needs a range with this source`);
  return `10.244.${n.range}.0/24`;
}

async function stopWithin(n: ClusterNode, ms: number): Promise<void> {
  const d = n.daemon;
  n.daemon = undefined;
  if (!d) return;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((r) => (timer = setTimeout(() => r('late'), ms)));
  const outcome = await Promise.race([d.stop().catch(() => undefined), late]);
  clearTimeout(timer);
  if (outcome === 'late') await d.kill('SIGKILL');
}
