import { containerdSuite } from './containerd-workloadnet.suite';

containerdSuite('linux', {
  podCidr: '10.254.0.0/24',
  subnetPrefix: '10.254.0.',
  daemonArgs: ['--backend', 'linux'],
});
