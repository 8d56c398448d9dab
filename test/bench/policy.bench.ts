// NetworkPolicy at scale: 1,000 local pods and 1,000 policies on one node. How long a change (a pod's
// label, a policy's port) takes from the API server to the kernel, how much policy adds to an attach,
// and what it costs the daemon in memory. A real daemon (Linux backend, Kubernetes source) programs a
// test-owned node namespace; the stand-in API server holds the objects; `nft monitor` in the node
// namespace says when the kernel has the change (the transaction's first event). Figures are reported,
// never asserted: the machines are shared.
// Run alone with: node dist/test/bench/policy.bench.js [pods] [policies]

import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createInterface } from 'node:readline';
import { attachRequest, detachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { NetnsSet, type TestNamespace } from '../support/netns';
import { StandInKubeApiServer } from '../support/standin-kube-apiserver';
import { waitUntil } from '../support/wait-until';
import { printRowsAndExit, columnRow, type PrintedRow } from './bench-main';
import { percentile } from './stats';

const NAMESPACES = 10;
const APPS = 100;
const ROLES = 50;
const CHANGES = 200;
const ATTACHES = 100;
const RANGE = '10.250.0.0/16';

interface Bench {
  api: StandInKubeApiServer;
  node: TestNamespace;
  netns: NetnsSet;
  root: string;
}

/** Pod i of the fill: its namespace, name and labels (an app and a role, so that policies select it). */
function podOf(
  i: number,
  role = i % ROLES,
): { namespace: string; name: string; labels: Record<string, string> } {
  return {
    namespace: `ns${i % NAMESPACES}`,
    name: `p${i}`,
    labels: { app: `a${i % APPS}`, role: `r${role}` },
  };
}

/** Policy j: the pods of an app accept TCP on a port from pods of a role in every namespace. */
function policyOf(j: number, port = 8000 + (j % 200)): Record<string, unknown> {
  return {
    podSelector: { matchLabels: { app: `a${j % APPS}` } },
    policyTypes: ['Ingress'],
    ingress: [
      {
        from: [{ namespaceSelector: {}, podSelector: { matchLabels: { role: `r${j % ROLES}` } } }],
        ports: [{ protocol: 'TCP', port }],
      },
    ],
  };
}

/** `nft monitor` in the node namespace: each line with the time it arrived. */
class KernelMonitor {
  private readonly child: ChildProcess;
  private waiters: Array<{ match: (l: string) => boolean; done: (t: number) => void }> = [];

  constructor(node: string) {
    // Line-buffered: into a pipe, nft's output would otherwise wait for a full buffer.
    this.child = spawn('ip', ['netns', 'exec', node, 'stdbuf', '-oL', 'nft', 'monitor'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    createInterface({ input: this.child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      const t = performance.now();
      if (process.env.POLICY_BENCH_DEBUG) process.stderr.write(`monitor: ${line}\n`);
      this.waiters = this.waiters.filter((w) => (w.match(line) ? (w.done(t), false) : true));
    });
  }

  /**
   * The time of the next transaction's end (`# new generation`): the bench is the only writer, so the
   * first one after a change is the change's. NaN when none comes within `timeoutMs`.
   */
  nextTransaction(timeoutMs = 5000): Promise<number> {
    return new Promise((done) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        done(Number.NaN);
      }, timeoutMs);
      const waiter = {
        match: (l: string) => l.startsWith('# new generation'),
        done: (t: number) => {
          clearTimeout(timer);
          done(t);
        },
      };
      this.waiters.push(waiter);
    });
  }

  stop(): void {
    this.child.kill('SIGKILL');
  }
}

async function startDaemon(b: Bench, policy: 'on' | 'off'): Promise<DaemonProcess> {
  const d = await DaemonProcess.start({
    dir: path.join(b.root, `daemon-${policy}`),
    flags: {
      'pool-source': 'kubernetes',
      kubeconfig: b.api.kubeconfig(),
      'node-name': 'bench-node',
      'host-netns': b.node.path,
      fabric: 'off',
      'network-policy': policy,
      'log-level': 'warn',
    },
  });
  await waitUntil(async () => (await d.client.status()).ready, 'the daemon to be ready', 60_000, {
    intervalMs: 200,
  });
  return d;
}

/** Attaches pods `from`..`to`-1 with their identity; the pod's address goes to the API as the kubelet's would. */
async function fill(
  b: Bench,
  d: DaemonProcess,
  spaces: TestNamespace[],
  from: number,
  to: number,
): Promise<Map<number, string>> {
  const ips = new Map<number, string>();
  const one = async (i: number): Promise<void> => {
    const p = podOf(i);
    const res = await d.client.call(
      d.client.raw.attach,
      attachRequest(`w${i}`, spaces[i]?.path ?? '', 'eth0', { pod: { ...p, uid: `u${i}` } }),
    );
    const ip = (res.ips[0]?.cidr ?? '').split('/')[0] ?? '';
    ips.set(i, ip);
    b.api.putPod({ ...p, uid: `u${i}`, ips: [ip], nodeName: 'bench-node' });
  };
  for (let i = from; i < to; i += 16)
    await Promise.all(Array.from({ length: Math.min(16, to - i) }, (_, k) => one(i + k)));
  return ips;
}

const rssMiB = (pid: number): number => {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) / 1024;
};

/** Attach then detach `count` pods one at a time: the attach times. */
async function attachTimes(
  b: Bench,
  d: DaemonProcess,
  spaces: TestNamespace[],
  base: number,
  count: number,
): Promise<number[]> {
  const times: number[] = [];
  for (let k = 0; k < count; k++) {
    const i = base + k;
    const p = podOf(i);
    b.api.putPod({ ...p, uid: `u${i}`, nodeName: 'bench-node' });
    const t0 = performance.now();
    await d.client.call(
      d.client.raw.attach,
      attachRequest(`w${i}`, spaces[i]?.path ?? '', 'eth0', { pod: { ...p, uid: `u${i}` } }),
    );
    times.push(performance.now() - t0);
    await d.client.call(d.client.raw.detach, detachRequest(`w${i}`, spaces[i]?.path ?? ''));
  }
  return times;
}

/** Label changes and policy changes, each timed from the API server's write to the kernel's event. */
async function changeTimes(
  b: Bench,
  pods: number,
  policies: number,
  ips: Map<number, string>,
): Promise<{ label: number[]; policy: number[]; missed: number }> {
  const monitor = new KernelMonitor(b.node.name);
  await new Promise((r) => setTimeout(r, 300));
  const label: number[] = [];
  const policy: number[] = [];
  try {
    for (let k = 0; k < CHANGES; k++) {
      const i = (k * 37) % pods;
      const ip = ips.get(i) ?? '';
      const p = podOf(i, (i + k + 1) % ROLES);
      const seen = monitor.nextTransaction();
      const t0 = performance.now();
      b.api.putPod({ ...p, uid: `u${i}`, ips: [ip], nodeName: 'bench-node' });
      label.push((await seen) - t0);
      const j = (k * 13) % policies;
      const port = 20_000 + k;
      const ruled = monitor.nextTransaction();
      const t1 = performance.now();
      b.api.putNetworkPolicy(`ns${j % NAMESPACES}`, `pol${j}`, policyOf(j, port));
      policy.push((await ruled) - t1);
    }
  } finally {
    monitor.stop();
  }
  const missed = [...label, ...policy].filter((t) => Number.isNaN(t)).length;
  return {
    label: label.filter((t) => !Number.isNaN(t)),
    policy: policy.filter((t) => !Number.isNaN(t)),
    missed,
  };
}

export async function benchPolicy(opts: { pods?: number; policies?: number } = {}): Promise<PrintedRow[]> {
  const pods = opts.pods ?? 1000;
  const policies = opts.policies ?? 1000;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-bench-policy-'));
  const netns = new NetnsSet('wnbp-');
  const api = await StandInKubeApiServer.start(path.join(root, 'api'));
  const b: Bench = { api, node: netns.add('node'), netns, root };
  const rows: PrintedRow[] = [];
  const daemons: DaemonProcess[] = [];
  try {
    api.setNode('bench-node', [RANGE]);
    for (let n = 0; n < NAMESPACES; n++) api.putNamespace(`ns${n}`, { team: `t${n % 3}` });
    for (let j = 0; j < policies; j++) api.putNetworkPolicy(`ns${j % NAMESPACES}`, `pol${j}`, policyOf(j));
    const spaces = netns.addMany(pods + ATTACHES * 2, 'pod');
    const say = (what: string): void => void process.stderr.write(`policy bench: ${what}\n`);
    say(`${pods} pods with policy off`);
    const off = await startDaemon(b, 'off');
    daemons.push(off);
    await fill(b, off, spaces, 0, pods);
    const offRss = rssMiB(off.child.pid ?? 0);
    const offAttach = await attachTimes(b, off, spaces, pods, ATTACHES);
    for (let i = 0; i < pods; i++)
      await off.client.call(off.client.raw.detach, detachRequest(`w${i}`, spaces[i]?.path ?? ''));
    await off.stop();
    daemons.pop();
    say(`${pods} pods with policy on`);
    const on = await startDaemon(b, 'on');
    daemons.push(on);
    const ips = await fill(b, on, spaces, 0, pods);
    const onRss = rssMiB(on.child.pid ?? 0);
    say('attaches with policy on');
    const onAttach = await attachTimes(b, on, spaces, pods + ATTACHES, ATTACHES);
    say('label and policy changes');
    const { label, policy, missed } = await changeTimes(b, pods, policies, ips);
    const st = (await on.client.status()).policy;
    rows.push(
      {
        name: `policy: ${pods} local pods, ${policies} policies: rules`,
        value: st?.rules ?? 0,
        unit: 'rules',
      },
      { name: 'policy: address sets', value: st?.sets ?? 0, unit: 'sets' },
      { name: 'policy: label change -> in the kernel p50', value: percentile(label, 50), unit: 'ms' },
      { name: 'policy: label change -> in the kernel p99', value: percentile(label, 99), unit: 'ms' },
      { name: 'policy: policy change -> in the kernel p50', value: percentile(policy, 50), unit: 'ms' },
      { name: 'policy: policy change -> in the kernel p99', value: percentile(policy, 99), unit: 'ms' },
      { name: 'policy: changes with no kernel transaction within 5 s', value: missed, unit: 'changes' },
      { name: 'policy: attach p50, policy off', value: percentile(offAttach, 50), unit: 'ms' },
      { name: 'policy: attach p50, policy on (pod isolated)', value: percentile(onAttach, 50), unit: 'ms' },
      {
        name: 'policy: attach p50 on / off',
        value: percentile(onAttach, 50) / percentile(offAttach, 50),
        unit: 'x',
      },
      { name: `policy: daemon RSS with ${pods} pods, policy off`, value: offRss, unit: 'MiB' },
      {
        name: `policy: daemon RSS with ${pods} pods and ${policies} policies, policy on`,
        value: onRss,
        unit: 'MiB',
      },
      { name: 'policy: RSS on - off', value: onRss - offRss, unit: 'MiB' },
    );
  } finally {
    for (const d of daemons) await d.stop().catch(() => undefined);
    netns.cleanup();
    await api.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return rows;
}

if (require.main === module)
  printRowsAndExit(
    benchPolicy({ pods: Number(process.argv[2] ?? 1000), policies: Number(process.argv[3] ?? 1000) }),
    columnRow,
  );
