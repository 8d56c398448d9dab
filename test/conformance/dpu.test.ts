import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { SimProcess, waitUntil } from '../backends/dpu/sim-process';
import { DaemonProcess } from '../support/daemon-process';
import { NetnsSet } from '../support/netns';
import { conformanceSuite } from './workload-api.suite';

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
    const agentSocket = path.join(work, 'agent.sock');
    const d = await DaemonProcess.start({
      dir: work,
      netns: nodeNetns,
      args: ['--backend', 'dpu', '--agent-socket', agentSocket, '--pod-cidr', podCidr],
    });
    const sim = SimProcess.start({
      socket: agentSocket,
      agentId: 'conformance-dpu',
      stateFile: path.join(work, 'sim-state.json'),
      extra: ['--dataplane', 'netns', '--dpu-netns', dpu.name, '--host-netns', `/var/run/netns/${nodeNetns}`],
    });
    await waitUntil(
      async () => (await d.client.call(d.client.raw.status, {})).ready,
      'the daemon to see the agent',
      15_000,
    );
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
