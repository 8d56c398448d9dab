import { execFileSync } from 'node:child_process';
import type { NetnsSet, TestNamespace } from '../../support/netns';

// The egress tests' node: a node namespace forwarding between two pods (10.244.1.5 and 10.244.2.5, each
// on its own veth, the node at .1 of each /24) and an "outside" namespace (198.51.100.2, the node at
// .1) that knows no pod range, as a router upstream of a node does not.

export interface EgressNode {
  node: TestNamespace;
  pod1: TestNamespace;
  pod2: TestNamespace;
  outside: TestNamespace;
}

const ip = (ns: string, ...args: string[]): void => void execFileSync('ip', ['-n', ns, ...args]);

/** Builds it in namespaces of `nss` (which deletes them). */
export function egressNode(nss: NetnsSet): EgressNode {
  const n: EgressNode = {
    node: nss.add('node'),
    pod1: nss.add('pod'),
    pod2: nss.add('pod'),
    outside: nss.add('out'),
  };
  for (const ns of Object.values(n)) ip(ns.name, 'link', 'set', 'lo', 'up');
  execFileSync('ip', ['netns', 'exec', n.node.name, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  const pair = (peer: TestNamespace, hostIf: string, peerAddr: string, hostAddr: string): void => {
    ip(n.node.name, 'link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', peer.name);
    ip(n.node.name, 'addr', 'add', hostAddr, 'dev', hostIf);
    ip(n.node.name, 'link', 'set', hostIf, 'up');
    ip(peer.name, 'addr', 'add', peerAddr, 'dev', 'eth0');
    ip(peer.name, 'link', 'set', 'eth0', 'up');
  };
  pair(n.pod1, 'p1', '10.244.1.5/24', '10.244.1.1/24');
  pair(n.pod2, 'p2', '10.244.2.5/24', '10.244.2.1/24');
  pair(n.outside, 'up0', '198.51.100.2/24', '198.51.100.1/24');
  ip(n.pod1.name, 'route', 'add', 'default', 'via', '10.244.1.1');
  ip(n.pod2.name, 'route', 'add', 'default', 'via', '10.244.2.1');
  return n;
}
