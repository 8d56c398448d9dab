import * as path from 'node:path';
import { DaemonProcess } from '../support/daemon-process';
import { conformanceSuite } from './workload-api.suite';

// The Linux backend: the daemon runs inside the test's node namespace and programs veth pairs.
conformanceSuite({
  name: 'linux',
  nodeTraffic: true,
  async start({ nodeNetns, dir, podCidr }) {
    const d = await DaemonProcess.start({
      dir: path.join(dir, 'linux'),
      netns: nodeNetns,
      args: ['--backend', 'linux', '--pod-cidr', podCidr],
    });
    return { client: d.client, stop: () => d.stop() };
  },
});
