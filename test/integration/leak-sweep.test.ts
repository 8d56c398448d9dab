import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { ApiClient } from '../../cli/api-client';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { SimProcess } from '../support/sim-process';
import { waitUntil } from '../support/wait-until';
import { attachRequest } from '../support/attach-request';
import { linuxHostLinks } from '../support/kernel-view';
import { NodeFixture } from '../support/node-fixture';
import { Store } from '../../core/store/store';
import { ipJson } from '../support/netns';

// A workload's namespace deleted behind the daemon's back (no DEL: a runtime crash, a node-local
// cleanup) must not keep its address and dataplane until the next restart. The leak sweep releases it
// after seeing the namespace gone twice, and never touches a workload whose namespace exists, nor any
// while the daemon's view of the namespace directory is not the one the workloads were attached
// through. Both backends, real daemons, namespaces deleted with ip(8). The tests wait on sweeps the
// daemon logs having run, never on time: a loaded machine runs fewer of them, not other ones.

const SWEEP_MS = 400;

/** How long a sweep may take to show. */
const SWEEP_WAIT_MS = 15_000;
/** The daemon's metrics, on the node namespace's loopback. */
const METRICS_PORT = 9477;

function metrics(node: string): string {
  return execFileSync(
    'ip',
    ['netns', 'exec', node, 'curl', '-sS', '--max-time', '5', `http://127.0.0.1:${METRICS_PORT}/metrics`],
    { encoding: 'utf8' },
  );
}

async function attach(client: ApiClient, workloadId: string, netnsPath: string): Promise<void> {
  await client.call(client.raw.attach, attachRequest(workloadId, netnsPath));
}

const listed = async (client: ApiClient): Promise<string[]> =>
  (await client.call(client.raw.list, {})).attachments.map((a) => a.workloadId).sort();

/** Periodic sweeps the daemon has finished, as its (debug) log says. */
function periodicSweeps(daemon: DaemonProcess): number {
  return fs
    .readFileSync(daemon.logFile, 'utf8')
    .split('\n')
    .filter((l) => l.includes('leak sweep pass done') && l.includes('"force":false')).length;
}

/** Waits until `n` more periodic sweeps have finished. */
async function sweepsPass(daemon: DaemonProcess, n: number): Promise<void> {
  const target = periodicSweeps(daemon) + n;
  await waitUntil(() => periodicSweeps(daemon) >= target, `${n} more sweeps`, SWEEP_WAIT_MS, {
    intervalMs: 50,
  });
}

interface GcRefs {
  removed: Array<{ workloadId: string }>;
  suspected: Array<{ workloadId: string }>;
}

/** `workloadnet gc` with `args`, its JSON answer by workload id. */
function gc(daemon: DaemonProcess, ...args: string[]): { removed: string[]; suspected: string[] } {
  const out = execFileSync(process.execPath, [CLI, 'gc', ...args, '--json', '--socket', daemon.socket], {
    encoding: 'utf8',
  });
  const refs = JSON.parse(out) as GcRefs;
  return {
    removed: refs.removed.map((r) => r.workloadId).sort(),
    suspected: refs.suspected.map((r) => r.workloadId).sort(),
  };
}

/** Interface names inside a workload's namespace. */
const podLinks = (name: string): string[] =>
  ipJson<Array<{ ifname: string }>>(name, ['link', 'show']).map((l) => l.ifname);

describeRoot('leak sweep: namespaces deleted behind the daemon (root, test-owned namespaces)', function () {
  this.timeout(90_000);
  // A fresh node for each test: each runs its own daemon with its own backend.
  const fx = new NodeFixture({ prefix: 'wn-sweep-' });
  const stops: Array<() => Promise<unknown>> = [];

  beforeEach(() => fx.setUp());
  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
    await fx.cleanup();
  });

  /** Runs the scenario; returns the kept workload's namespace name. */
  async function sweepsAway(daemon: DaemonProcess): Promise<string> {
    const client = daemon.client;
    const gone = fx.namespaces.add();
    const kept = fx.namespaces.add();
    await attach(client, 'sweep-gone', gone.path);
    await attach(client, 'sweep-kept', kept.path);
    const used = async (): Promise<number> => Number((await client.status()).pools[0]?.used ?? -1);
    expect(await used()).to.equal(2);

    execFileSync('ip', ['netns', 'del', gone.name]);
    await waitUntil(
      async () => !(await listed(client)).includes('sweep-gone'),
      'the sweep to release it',
      SWEEP_WAIT_MS,
      {
        intervalMs: 100,
      },
    );
    expect(await listed(client)).to.deep.equal(['sweep-kept']);
    expect(await used()).to.equal(1);
    expect(fs.readFileSync(daemon.logFile, 'utf8')).to.match(
      /"workloadId":"sweep-gone".*released an attachment whose network namespace is gone/,
    );
    // More sweeps pass; the workload whose namespace exists is never touched.
    await sweepsPass(daemon, 3);
    expect(await listed(client)).to.deep.equal(['sweep-kept']);
    return kept.name;
  }

  it('linux backend: releases the attachment and its host link, keeps the live one', async () => {
    const daemon = await DaemonProcess.start({
      dir: fx.dir,
      netns: fx.node,
      args: ['--pod-cidr', '10.252.7.0/24', '--sweep-interval-ms', String(SWEEP_MS)],
    });
    stops.push(() => daemon.stop());
    const kept = await sweepsAway(daemon);
    const links = await linuxHostLinks(fx.node);
    expect(links.map((l) => l.ifalias).filter(Boolean)).to.deep.equal(['workloadnet:sweep-kept/eth0']);
    expect(podLinks(kept)).to.include('eth0');
  });

  it('dpu backend: releases the attachment and the agent drops its port', async () => {
    const agentSocket = path.join(fx.dir, 'agent.sock');
    const daemon = await DaemonProcess.start({
      dir: fx.dir,
      netns: fx.node,
      args: [
        '--backend',
        'dpu',
        '--agent-socket',
        agentSocket,
        '--pod-cidr',
        '10.252.8.0/24',
        '--sweep-interval-ms',
        String(SWEEP_MS),
      ],
    });
    stops.push(() => daemon.stop());
    const sim = SimProcess.start({
      socket: agentSocket,
      agentId: 'sweep-dpu',
      stateFile: path.join(fx.dir, 'sim.json'),
    });
    stops.push(() => sim.stop('SIGKILL'));
    await waitUntil(async () => (await daemon.client.status()).ready, 'the agent', SWEEP_WAIT_MS, {
      intervalMs: 100,
    });
    await sweepsAway(daemon);
    await sim.waitForState(
      (s) => s.ports.map((p) => p.name).join() === 'sweep-kept/eth0',
      'the agent to drop the port',
    );
  });

  it('gc --dry-run names what a sweep would release and changes nothing; gc --namespaces-gone releases it on the second sighting', async () => {
    // The periodic sweep is off, so that only the test's own calls look: nothing races them.
    const daemon = await DaemonProcess.start({
      dir: fx.dir,
      netns: fx.node,
      args: ['--pod-cidr', '10.252.9.0/24', '--sweep-interval-ms', '0'],
    });
    stops.push(() => daemon.stop());
    const client = daemon.client;
    const gone = fx.namespaces.add();
    const kept = fx.namespaces.add();
    await attach(client, 'sweep-gone', gone.path);
    await attach(client, 'sweep-kept', kept.path);
    execFileSync('ip', ['netns', 'del', gone.name]);

    // Not seen gone before: suspected, and a dry run counts as no sighting.
    for (let i = 0; i < 2; i++) {
      expect(gc(daemon, '--dry-run')).to.deep.equal({ removed: [], suspected: ['sweep-gone'] });
    }
    expect(await listed(client)).to.deep.equal(['sweep-gone', 'sweep-kept']);
    expect(gc(daemon, '--namespaces-gone')).to.deep.equal({ removed: [], suspected: ['sweep-gone'] });
    expect(gc(daemon, '--dry-run')).to.deep.equal({ removed: ['sweep-gone'], suspected: [] });
    expect(await listed(client)).to.deep.equal(['sweep-gone', 'sweep-kept']);
    expect(gc(daemon, '--namespaces-gone')).to.deep.equal({ removed: ['sweep-gone'], suspected: [] });
    expect(await listed(client)).to.deep.equal(['sweep-kept']);
    const links = await linuxHostLinks(fx.node);
    expect(links.map((l) => l.ifalias).filter(Boolean)).to.deep.equal(['workloadnet:sweep-kept/eth0']);
  });

  it('a daemon restarted without the namespace directory keeps every workload and says why; once it sees it again, a deleted namespace goes as before', async () => {
    const flags = ['--pod-cidr', '10.252.10.0/24', '--sweep-interval-ms', String(SWEEP_MS)];
    const first = await DaemonProcess.start({ dir: fx.dir, netns: fx.node, args: flags });
    const pods = [fx.namespaces.add(), fx.namespaces.add(), fx.namespaces.add()];
    for (const [i, pod] of pods.entries()) await attach(first.client, `blind-${i}`, pod.path);
    await first.stop();
    const names = pods.map((_, i) => `blind-${i}`);
    const aliases = names.map((n) => `workloadnet:${n}/eth0`);
    // One workload's dataplane is gone too (its host link deleted, the pod end with it): the start-up
    // reconcile finds it missing and, its namespace out of sight, must keep it rather than release it.
    const cut = (await linuxHostLinks(fx.node)).find((l) => l.ifalias === aliases[2]);
    execFileSync('ip', ['-n', fx.node, 'link', 'del', cut!.ifname]);

    // What a container without the hostPath mount sees: an empty tmpfs where /var/run/netns was. The
    // daemon runs in a mount namespace of its own, so the tmpfs is its alone.
    const daemon = await DaemonProcess.start({
      dir: fx.dir,
      netns: fx.node,
      args: [...flags, '--metrics-listen', `127.0.0.1:${METRICS_PORT}`],
      wrap: [
        'unshare',
        '--mount',
        '--propagation',
        'private',
        'sh',
        '-c',
        'mount -t tmpfs wn-hidden /var/run/netns && exec "$@"',
        'sh',
      ],
    });
    stops.push(() => daemon.stop());
    const client = daemon.client;
    const status = () => client.status();
    await waitUntil(
      async () => (await status()).reasons.some((r) => r.includes('leak sweep held')),
      'Status to say why the sweep holds',
      SWEEP_WAIT_MS,
      { intervalMs: 100 },
    );
    await sweepsPass(daemon, 4);
    const st = await status();
    expect(st.reconcile?.warnings.join('\n')).to.match(
      /1 attachment\(s\) with their dataplane missing kept: leak sweep held: \/var\/run\/netns is another mount/,
    );
    expect(st.ready).to.equal(false);
    expect(st.reasons.join('\n')).to.match(
      /leak sweep held: \/var\/run\/netns is another mount \(device [0-9]+:[0-9]+\) than the one 3 attachment\(s\) were made through/,
    );
    expect(metrics(fx.node)).to.match(/^workloadnet_sweep_held\{reason="directory_other_mount"\} 1$/m);
    expect(await listed(client)).to.deep.equal(names);
    expect((await client.status()).pools[0]?.used).to.equal(3);
    expect((await linuxHostLinks(fx.node)).map((l) => l.ifalias).sort()).to.deep.equal(aliases.slice(0, 2));
    for (const pod of pods.slice(0, 2)) expect(podLinks(pod.name)).to.include('eth0');
    expect(fs.readFileSync(daemon.logFile, 'utf8')).to.not.match(/released an attachment/);

    // The directory is back in the daemon's view: the sweep goes on, and releases only what is gone.
    execFileSync('nsenter', ['-t', String(daemon.child.pid), '-m', 'umount', '/var/run/netns']);
    await waitUntil(async () => (await status()).ready, 'Status ready again', SWEEP_WAIT_MS, {
      intervalMs: 100,
    });
    expect(metrics(fx.node)).to.match(/^workloadnet_sweep_held\{reason="directory_other_mount"\} 0$/m);
    execFileSync('ip', ['netns', 'del', pods[0]!.name]);
    await waitUntil(
      async () => !(await listed(client)).includes('blind-0'),
      'the sweep to release the deleted one',
      SWEEP_WAIT_MS,
      { intervalMs: 100 },
    );
    await sweepsPass(daemon, 3);
    // blind-2 lives on (its namespace exists) with its dataplane missing: kept, for Check or Detach.
    expect(await listed(client)).to.deep.equal(names.slice(1));
    expect((await linuxHostLinks(fx.node)).map((l) => l.ifalias)).to.deep.equal([aliases[1]]);
    expect(podLinks(pods[1]!.name)).to.include('eth0');
  });
  it('a daemon started after a reboot releases the workloads recorded before it, though all look gone at once', async () => {
    const flags = ['--pod-cidr', '10.252.11.0/24', '--sweep-interval-ms', String(SWEEP_MS)];
    const stateDir = path.join(fx.dir, 'state');
    const first = await DaemonProcess.start({ dir: fx.dir, netns: fx.node, args: flags });
    const pods = [fx.namespaces.add(), fx.namespaces.add(), fx.namespaces.add()];
    const names = pods.map((_, i) => `reboot-${i}`);
    for (const [i, pod] of pods.entries()) await attach(first.client, names[i]!, pod.path);
    await first.stop();
    // What a reboot leaves: every namespace gone, and with them the veth pairs.
    for (const pod of pods) execFileSync('ip', ['netns', 'del', pod.name]);
    // The kernel takes a namespace down in the background; its veth ends go with it.
    await waitUntil(async () => (await linuxHostLinks(fx.node)).length === 0, 'the host links to go', 10_000);

    // In the same boot, every namespace gone at once is no evidence: the guard keeps them all.
    const sameBoot = await DaemonProcess.start({ dir: fx.dir, netns: fx.node, args: flags });
    stops.push(() => sameBoot.stop());
    const kept = await sameBoot.client.status();
    expect(kept.reconcile?.released).to.equal(0);
    expect(kept.reconcile?.warnings.join('\n')).to.match(
      /3 attachment\(s\) with their dataplane missing kept/,
    );
    expect(await listed(sameBoot.client)).to.deep.equal(names);
    await sameBoot.stop();

    // The store's last reconcile was in another boot: every row predates this one.
    const store = Store.open(stateDir, { bootId: 'an-earlier-boot' });
    await store.recordReconciledBoot();
    await store.close();
    const rebooted = await DaemonProcess.start({ dir: fx.dir, netns: fx.node, args: flags });
    stops.push(() => rebooted.stop());
    const st = await rebooted.client.status();
    expect(st.reconcile?.released).to.equal(3);
    expect(st.reconcile?.warnings.join('\n')).to.match(
      /3 attachment\(s\) recorded before this boot released: their namespaces did not survive the reboot/,
    );
    expect(await listed(rebooted.client)).to.deep.equal([]);
    expect(st.pools[0]?.used).to.equal(0);
    expect(st.ready, st.reasons.join('; ')).to.equal(true);
  });
});
