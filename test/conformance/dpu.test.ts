import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { SimProcess, waitUntil } from '../support/sim-process';
import { DaemonProcess } from '../support/daemon-process';
import { NetnsSet } from '../support/netns';
import { conformanceSuite } from './workload-api.suite';

/** The daemon with the DPU backend in `work`, on the node namespace, waiting for agents on its socket. */
async function startDpuDaemon(
  work: string,
  nodeNetns: string,
  podCidr: string,
): Promise<{ d: DaemonProcess; agentSocket: string }> {
  const agentSocket = path.join(work, 'agent.sock');
  const d = await DaemonProcess.start({
    dir: work,
    netns: nodeNetns,
    args: ['--backend', 'dpu', '--agent-socket', agentSocket, '--pod-cidr', podCidr],
  });
  return { d, agentSocket };
}

/** The simulator's netns-mode arguments: the DPU's namespace and the node's, where its "VFs" go. */
const netnsDataplane = (dpuNetns: string, nodeNetns: string): string[] => [
  '--dataplane',
  'netns',
  '--dpu-netns',
  dpuNetns,
  '--host-netns',
  `/var/run/netns/${nodeNetns}`,
];

// The DPU backend with the simulator in netns mode: the simulator owns a namespace standing for the DPU,
// hands each port's "VF" to the node namespace, and routes between representors, so traffic between
// two workloads really crosses the "DPU".
conformanceSuite({
  name: 'dpu (simulator, netns dataplane)',
  nodeTraffic: false,
  async start({ nodeNetns, dir, podCidr }) {
    const namespaces = new NetnsSet('wnk-dpu-');
    const dpu = namespaces.add();
    execFileSync('ip', ['-n', dpu.name, 'link', 'set', 'lo', 'up']);
    const work = path.join(dir, 'dpu');
    const { d, agentSocket } = await startDpuDaemon(work, nodeNetns, podCidr);
    const sim = SimProcess.start({
      socket: agentSocket,
      agentId: 'conformance-dpu',
      stateFile: path.join(work, 'sim-state.json'),
      extra: netnsDataplane(dpu.name, nodeNetns),
    });
    await waitUntil(async () => (await d.client.status()).ready, 'the daemon to see the agent', 15_000);
    return {
      client: d.client,
      stop: async () => {
        await sim.stop();
        await d.stop();
        namespaces.cleanup();
      },
    };
  },
});

// Two DPUs on one node, each a simulator owning its own namespace, joined by a "fabric" link that
// carries the pod CIDR between them. Both advertise the same room, so placement alternates (ties go by
// id, then the emptier one wins): the suite's two workloads sit on different DPUs and their traffic
// crosses both.
conformanceSuite({
  name: 'dpu (two simulators, netns dataplane)',
  nodeTraffic: false,
  async start({ nodeNetns, dir, podCidr }) {
    const namespaces = new NetnsSet('wn-fleet-');
    const dpus = [namespaces.add(), namespaces.add()];
    const fabric = [
      { ns: dpus[0]?.name ?? '', address: '192.0.2.1', peer: '192.0.2.2' },
      { ns: dpus[1]?.name ?? '', address: '192.0.2.2', peer: '192.0.2.1' },
    ];
    execFileSync('ip', [
      '-n',
      fabric[0]!.ns,
      'link',
      'add',
      'fab0',
      'type',
      'veth',
      'peer',
      'name',
      'fab0',
      'netns',
      fabric[1]!.ns,
    ]);
    for (const f of fabric) {
      execFileSync('ip', ['-n', f.ns, 'link', 'set', 'lo', 'up']);
      execFileSync('ip', ['-n', f.ns, 'addr', 'add', `${f.address}/30`, 'dev', 'fab0']);
      execFileSync('ip', ['-n', f.ns, 'link', 'set', 'fab0', 'up']);
      // Each DPU's own workloads have host routes through their representors; the rest of the pod
      // CIDR is behind the other DPU.
      execFileSync('ip', ['-n', f.ns, 'route', 'add', podCidr, 'via', f.peer, 'dev', 'fab0']);
    }
    const work = path.join(dir, 'dpu2');
    const { d, agentSocket } = await startDpuDaemon(work, nodeNetns, podCidr);
    const sims = fabric.map((f, i) =>
      SimProcess.start({
        socket: agentSocket,
        agentId: `conformance-dpu-${i}`,
        stateFile: path.join(work, `sim-${i}-state.json`),
        extra: [...netnsDataplane(f.ns, nodeNetns), '--max-ports', '64'],
      }),
    );
    await waitUntil(
      async () => (await d.client.status()).backendDetails.agentsHealthy === '2',
      'the daemon to see both agents',
      15_000,
    );
    return {
      client: d.client,
      stop: async () => {
        await Promise.all(sims.map((s) => s.stop()));
        await d.stop();
        namespaces.cleanup();
      },
    };
  },
});
