import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { ApiClient } from '../../cli/api-client';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { SimProcess } from '../backends/dpu/sim-process';
import { waitUntil } from '../support/wait-until';
import { attachRequest } from '../support/attach-request';
import { linuxHostLinks } from '../support/kernel-view';
import { NodeFixture } from '../support/node-fixture';

// A workload's namespace deleted behind the daemon's back (no DEL: a runtime crash, a node-local
// cleanup) must not keep its address and dataplane until the next restart. The leak sweep releases it
// after seeing the namespace gone twice, and never touches a workload whose namespace exists. Both
// backends, real daemons, namespaces deleted with ip(8).

const describeRoot = isRoot ? describe : describe.skip;
const SWEEP_MS = 400;

/** How long a sweep may take to show. */
const SWEEP_WAIT_MS = 15_000;

async function attach(client: ApiClient, workloadId: string, netnsPath: string): Promise<void> {
  await client.call(client.raw.attach, attachRequest(workloadId, netnsPath));
}

const listed = async (client: ApiClient): Promise<string[]> =>
  (await client.call(client.raw.list, {})).attachments.map((a) => a.workloadId).sort();

describeRoot('leak sweep: namespaces deleted behind the daemon (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  // A fresh node for each test: each runs its own daemon with its own backend.
  const fx = new NodeFixture({ prefix: 'wn-sweep-' });
  const stops: Array<() => Promise<unknown>> = [];

  beforeEach(() => fx.setUp());
  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
    await fx.cleanup();
  });

  async function sweepsAway(daemon: DaemonProcess): Promise<void> {
    const client = daemon.client;
    const gone = fx.namespaces.add();
    const kept = fx.namespaces.add();
    await attach(client, 'sweep-gone', gone.path);
    await attach(client, 'sweep-kept', kept.path);
    const used = async (): Promise<number> =>
      Number((await client.call(client.raw.status, {})).pools[0]?.used ?? -1);
    expect(await used()).to.equal(2);

    // The sweep never touches an attachment younger than one interval: let both grow older first.
    await new Promise((r) => setTimeout(r, SWEEP_MS + 100));
    // The dry run names only the one whose namespace is gone, as suspected (or, if two sweeps already
    // saw it, as about to go), and changes nothing.
    execFileSync('ip', ['netns', 'del', gone.name]);
    const dry = execFileSync(
      process.execPath,
      [CLI, 'gc', '--dry-run', '--json', '--socket', daemon.socket],
      {
        encoding: 'utf8',
      },
    );
    const refs = JSON.parse(dry) as {
      removed: Array<{ workloadId: string }>;
      suspected: Array<{ workloadId: string }>;
    };
    expect([...refs.removed, ...refs.suspected].map((r) => r.workloadId)).to.include('sweep-gone');
    expect([...refs.removed, ...refs.suspected].map((r) => r.workloadId)).to.not.include('sweep-kept');

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
    await new Promise((r) => setTimeout(r, 3 * SWEEP_MS));
    expect(await listed(client)).to.deep.equal(['sweep-kept']);
  }

  it('linux backend: releases the attachment and its host link, keeps the live one', async () => {
    const daemon = await DaemonProcess.start({
      dir: fx.dir,
      netns: fx.node,
      args: ['--pod-cidr', '10.252.7.0/24', '--sweep-interval-ms', String(SWEEP_MS)],
    });
    stops.push(() => daemon.stop());
    await sweepsAway(daemon);
    const links = await linuxHostLinks(fx.node);
    expect(links.map((l) => l.ifalias).filter(Boolean)).to.deep.equal(['workloadnet:sweep-kept/eth0']);
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
    await waitUntil(
      async () => (await daemon.client.call(daemon.client.raw.status, {})).ready,
      'the agent',
      SWEEP_WAIT_MS,
      {
        intervalMs: 100,
      },
    );
    await sweepsAway(daemon);
    await sim.waitForState(
      (s) => s.ports.map((p) => p.name).join() === 'sweep-kept/eth0',
      'the agent to drop the port',
    );
  });
});
