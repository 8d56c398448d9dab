import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { SimProcess } from '../support/sim-process';
import { NetnsSet } from '../support/netns';
import { containerdSuite } from './containerd-workloadnet.suite';

// The same containerd suite with the DPU backend: the simulator agent (netns dataplane) connects to the
// daemon, and pods get "VFs" whose traffic crosses the simulated DPU namespace.
const namespaces = new NetnsSet('wne-dpu-');
let sim: SimProcess | undefined;

containerdSuite('dpu (simulator, netns dataplane)', {
  podCidr: '10.249.0.0/24',
  subnetPrefix: '10.249.0.',
  daemonArgs: ({ work }) => ['--backend', 'dpu', '--agent-socket', path.join(work, 'agent.sock')],
  async beforeDaemon({ nodeNetns, work }) {
    const dpu = namespaces.add();
    execFileSync('ip', ['-n', dpu.name, 'link', 'set', 'lo', 'up']);
    sim = SimProcess.start({
      socket: path.join(work, 'agent.sock'),
      agentId: 'e2e-dpu',
      stateFile: path.join(work, 'sim-state.json'),
      extra: ['--dataplane', 'netns', '--dpu-netns', dpu.name, '--host-netns', `/var/run/netns/${nodeNetns}`],
    });
  },
  async afterStop() {
    await sim?.stop();
    namespaces.cleanup();
  },
});
