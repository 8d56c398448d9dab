import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { EgressMasquerade } from '../../../backends/linux/egress-masquerade';
import { nftRunner } from '../../../backends/linux/fabric/nft-runner';
import { NetnsSet, type TestNamespace } from '../../support/netns';
import { egressNode } from './egress-node';
import { describeRoot } from '../../support/describe-root';
import { requireProgram } from '../../support/system-program';
import { TcpListeners, tcpAsk } from '../../support/netns-tcp';

// The egress masquerade beside kube-proxy, in each of its two modes, on a node namespace forwarding
// between two pods (10.244.1.5, 10.244.2.5) and an "outside" (198.51.100.2) that knows no pod range.
// kube-proxy's rules are the shape its proxiers write: a ClusterIP (10.96.0.10:80) DNATed to pod 2's
// port 8080, pod 2 reaching itself through the service marked for masquerade (hairpin), and its
// postrouting masquerade of marked packets at priority srcnat. Ours runs at srcnat + 10: a connection
// gets one source NAT, by whichever decides first, and pod to service to pod keeps the pod's address.

const CLUSTER_IP = '10.96.0.10';
const inNs = (ns: string, cmd: string, args: string[], input?: string): void =>
  void execFileSync('ip', ['netns', 'exec', ns, cmd, ...args], { input, stdio: ['pipe', 'ignore', 'pipe'] });

/** kube-proxy's nftables proxier: `table ip kube-proxy`. */
function kubeProxyNftables(ns: string): void {
  inNs(
    ns,
    'nft',
    ['-f', '-'],
    `table ip kube-proxy {
  chain mark-for-masquerade {
    meta mark set meta mark | 0x4000
  }
  chain masquerading {
    meta mark & 0x4000 == 0 return
    meta mark set meta mark ^ 0x4000
    masquerade fully-random
  }
  chain service-web {
    ip saddr 10.244.2.5 jump mark-for-masquerade
    meta l4proto tcp dnat to 10.244.2.5:8080
  }
  chain services {
    ip daddr ${CLUSTER_IP} tcp dport 80 goto service-web
  }
  chain nat-prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    jump services
  }
  chain nat-output {
    type nat hook output priority -100; policy accept;
    jump services
  }
  chain nat-postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    jump masquerading
  }
}
`,
  );
}

/** kube-proxy's iptables proxier, through iptables-nft (`table ip nat`). */
function kubeProxyIptables(ns: string): void {
  inNs(
    ns,
    'iptables-restore',
    ['--noflush'],
    `*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-WEB - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES -d ${CLUSTER_IP}/32 -p tcp --dport 80 -j KUBE-SVC-WEB
-A KUBE-SVC-WEB -s 10.244.2.5/32 -j KUBE-MARK-MASQ
-A KUBE-SVC-WEB -p tcp -j DNAT --to-destination 10.244.2.5:8080
COMMIT
`,
  );
}

for (const [mode, install, program] of [
  ['nftables', kubeProxyNftables, 'nft'],
  ['iptables-nft', kubeProxyIptables, 'iptables-restore'],
] as const) {
  describeRoot(
    `Linux backend: egress masquerade beside kube-proxy's ${mode} rules (root, test-owned namespaces)`,
    function () {
      this.timeout(60_000);
      const nss = new NetnsSet('wnkp-');
      const listeners = new TcpListeners();
      let node: TestNamespace;
      let pod1: TestNamespace;
      let pod2: TestNamespace;
      let outside: TestNamespace;

      before(async function () {
        requireProgram('nft');
        requireProgram(program);
        ({ node, pod1, pod2, outside } = egressNode(nss));
        install(node.name);
        await new EgressMasquerade(nftRunner({ netnsPath: node.path })).apply({
          pod: ['10.244.1.0/24', '10.244.2.0/24'],
          cluster: ['10.244.0.0/16'],
        });
        await listeners.listen(pod2.name, 8080, 'web');
        await listeners.listen(outside.name, 80, 'outside');
      });

      after(() => {
        listeners.stopAll();
        nss.cleanup();
      });

      it('keeps the pod address from pod to service to pod', async () => {
        expect(await tcpAsk(pod1.name, CLUSTER_IP, 80)).to.equal('web saw 10.244.1.5');
      });

      it("leaves kube-proxy's hairpin masquerade to kube-proxy", async () => {
        // Pod 2 through the service to itself: kube-proxy marks it and gives it the node's address on the
        // pod's own interface; a second source NAT of ours would not change that, nor break it.
        expect(await tcpAsk(pod2.name, CLUSTER_IP, 80)).to.equal('web saw 10.244.2.1');
      });

      it('masquerades a pod leaving the cluster ranges once, to the node', async () => {
        expect(await tcpAsk(pod1.name, '198.51.100.2', 80)).to.equal('outside saw 198.51.100.1');
      });
    },
  );
}
